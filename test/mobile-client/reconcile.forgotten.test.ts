import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { ManualScheduler, recoveryFor } from '../../clients/mobile/src';
import { mintOperationId } from '../../workers/reaction-tickets/operation-id';
import { deleteBatch } from '../../workers/retention/batch';
import { dbNowMs, setDbClockOffset, testPool } from '../helpers/db';
import { runSteps } from '../housekeeping/helpers';
import { DAY_MS, reactions, seedWorld, signOut, tokenFor } from '../reaction-tickets/helpers';
import { device, elapse, ISSUE, Network, serverRows, WRITE } from './helpers';

/**
 * Issue 15 items 1 and 5 on the device: an operation older than the admission window ends
 * in terminal reconciliation (the current message is read and shown), never in a late
 * application, whatever the server has deleted; and an operation the server no longer knows
 * is shown as "unknown, here is the current state", never as "not accepted".
 */
const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

/** Production retention: tickets 30 days after expiry, receipts 30 days, fences 90 days. */
async function housekeeping(): Promise<void> {
  await runSteps(pool, ['tickets'], { ticketGraceMs: 30 * DAY_MS });
  const limits = { receiptRetentionMs: 30 * DAY_MS, fenceRetentionMs: 90 * DAY_MS, drainGraceMs: 3_600_000 };
  await deleteBatch(pool, 'receipts', limits, null);
  await deleteBatch(pool, 'fences', limits, null);
}

describe('a forgotten operation ends in terminal reconciliation on the device (item 1)', () => {
  for (const day of [37, 400]) {
    it(`day ${day}: a choice whose issuance answer was lost never applies over the newer choice made since`, async () => {
      const w = await seedWorld();
      const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
      const phone = device();
      await phone.client.signIn({ actorId, token });
      const issued = phone.network.fault('POST', ISSUE, 'lose-response');
      const old = await phone.client.choose({ messageId, emoji: '👍', desired: 'present' });
      await phone.client.sync();
      await issued;
      phone.network.offline = true;
      // The same person, on another device, adds then removes 👍: the newer choice is "absent".
      const tablet = device({ clock: phone.clock });
      await tablet.client.signIn({ actorId, token });
      for (const desired of ['present', 'absent'] as const) {
        const e = await tablet.client.choose({ messageId, emoji: '👍', desired });
        await tablet.client.sync();
        expect(e.terminal?.outcome).toBe('applied');
      }

      await elapse(pool, day * DAY_MS + 3_600_000, phone.clock);
      await housekeeping();
      expect(await serverRows(pool, actorId)).toEqual({ tickets: 0, receipts: 0, fences: 0 });
      phone.network.offline = false;
      await phone.client.signIn({ actorId, token: await tokenFor(actorId) });
      await phone.client.sync();

      const truth = (await reactions(token, messageId)).body;
      expect(truth.reactions).toEqual([]);
      expect(old.terminal).toMatchObject({
        outcome: 'expired',
        code: 'operation_expired',
        reflected: 'absent',
      });
      expect(old.terminal?.message).toEqual(truth);
      expect(await serverRows(pool, actorId)).toEqual({ tickets: 0, receipts: 0, fences: 0 });
      expect(phone.network.count('PUT', WRITE)).toBe(0);
      expect(recoveryFor(old, 'en')!.body).toContain('currently does not show your 👍 reaction');
    });
  }

  it('day 400: a choice journaled before sign-out ends terminally at sign-in with the true state, never applied', async () => {
    const w = await seedWorld();
    const [actorId, messageId] = [w.actors[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({
      actorId,
      token: await tokenFor(actorId, { issuedAt: Math.floor(Date.now() / 1000) - 60 }),
    });
    d.network.offline = true;
    const entry = await d.client.choose({ messageId, emoji: '🎉', desired: 'present' });
    await d.client.sync();
    d.client.signOut();
    const signedOut = await signOut(actorId);
    d.network.offline = false;

    await elapse(pool, 400 * DAY_MS, d.clock);
    const token = await tokenFor(actorId, { issuedAt: signedOut });
    await d.client.signIn({ actorId, token });
    await d.client.sync();
    expect(entry.terminal).toMatchObject({
      outcome: 'expired',
      code: 'operation_expired',
      reflected: 'absent',
    });
    expect(entry.terminal?.message).toEqual((await reactions(token, messageId)).body);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 0, receipts: 0, fences: 0 });
    expect(recoveryFor(entry, 'vi')!.body).toContain('hiện không hiển thị cảm xúc 🎉');
  });
});

describe('an operation the server has forgotten is never reported as refused (item 5)', () => {
  it('a write applied with a lost answer, replayed after its ticket and receipt were deleted: terminal "unknown" with the current state, in en and vi', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    const written = d.network.fault('PUT', WRITE, 'lose-response');
    const entry = await d.client.choose({ messageId, emoji: '✅', desired: 'present' });
    await d.client.sync();
    await written;
    d.network.offline = true;
    await elapse(pool, 37 * DAY_MS + 3_600_000, d.clock);
    await housekeeping();
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 0, receipts: 0, fences: 0 });

    d.network.offline = false;
    await d.client.sync();
    const truth = (await reactions(token, messageId)).body;
    expect(entry.terminal).toMatchObject({
      outcome: 'unknown',
      code: 'operation_outcome_unknown',
      reflected: 'present',
      receipt: null,
    });
    expect(entry.terminal?.message).toEqual(truth);
    const en = recoveryFor(entry, 'en')!;
    expect(en).toMatchObject({ kind: 'unknown', action: 'react_again', title: 'Reaction status unknown' });
    expect(en.body).not.toContain('did not accept');
    expect(en.body).toContain('currently shows your ✅ reaction');
    const vi = recoveryFor(entry, 'vi')!;
    expect(vi.title).toBe('Không rõ trạng thái cảm xúc');
    expect(vi.body).not.toContain('không chấp nhận');
    expect(vi.body).toContain('hiện đang hiển thị cảm xúc ✅');
    // Terminal: nothing more is sent for it.
    const sent = d.network.log.length;
    d.clock.advance(10 * 60_000);
    await d.client.sync();
    expect(d.network.log.length).toBe(sent);
  });
});

describe('operation stamps follow server time', () => {
  it('a device clock an hour fast: the first issuance is refused as skewed, the choice is re-stamped on server time and applies once', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device({ clock: new ManualScheduler((await dbNowMs(pool)) + 3_600_000) });
    await d.client.signIn({ actorId, token });
    const entry = await d.client.choose({ messageId, emoji: '🚀', desired: 'present' });
    const firstId = entry.operationId;
    await d.client.sync();
    d.clock.advance(1000);
    await d.client.sync();
    expect(entry.terminal).toMatchObject({ outcome: 'applied', reflected: 'present' });
    expect(entry.operationId).not.toBe(firstId);
    expect(d.network.count('POST', ISSUE)).toBe(2);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
    // One journal entry, under its new ID, survives a restart.
    const next = device({ storage: d.storage, network: d.network, clock: d.clock });
    await next.client.signIn({ actorId, token });
    expect((await next.client.entries()).map((e) => e.operationId)).toEqual([entry.operationId]);
    // The next choice is stamped on the corrected clock: one issuance.
    const second = await next.client.choose({ messageId, emoji: '🛸', desired: 'present' });
    await next.client.sync();
    expect(second.terminal?.outcome).toBe('applied');
    expect(d.network.count('POST', ISSUE)).toBe(3);
  });

  it('a re-stamp interrupted between its two journal writes leaves only the re-stamped entry after a restart', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.offline = true;
    const entry = await d.client.choose({ messageId, emoji: '🧭', desired: 'present' });
    const keys = await d.storage.getAllKeys();
    const oldKey = keys.find((k) => k.endsWith(`/${entry.operationId}`))!;
    // The state a crash after the first write leaves: the new copy and the old one.
    const newId = mintOperationId((await dbNowMs(pool)) - 1000);
    const copy = {
      ...JSON.parse((await d.storage.getItem(oldKey))!),
      operationId: newId,
      restampedFrom: entry.operationId,
    };
    await d.storage.setItem(oldKey.replace(entry.operationId, newId), JSON.stringify(copy));
    const next = device({ storage: d.storage, network: new Network(), clock: d.clock });
    await next.client.signIn({ actorId, token });
    expect((await next.client.entries()).map((e) => e.operationId)).toEqual([newId]);
    expect(await d.storage.getItem(oldKey)).toBeNull();
    await next.client.sync();
    expect((await next.client.entries())[0]!.terminal?.outcome).toBe('applied');
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
  });
});
