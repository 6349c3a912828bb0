import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { recoveryFor } from '../../clients/mobile/src';
import { advanceDbClock, setDbClockOffset, testPool } from '../helpers/db';
import { DAY_MS, reactions, seedWorld, signOut, tokenFor } from '../reaction-tickets/helpers';
import { device, elapse, ISSUE, serverRows, WRITE } from './helpers';

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const PAST_EXPIRY = 7 * DAY_MS + 1000;

describe('terminal reconciliation on expiry', () => {
  it('expiry while offline after a lost response: stops replaying and shows the true (applied) state', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('PUT', WRITE, 'lose-response');
    const entry = await d.client.choose({ messageId, emoji: '✅', desired: 'present' });
    await d.client.sync(); // applied on the server, answer lost
    d.network.offline = true;
    d.clock.advance(1000);
    await d.client.sync(); // offline: still unconfirmed
    expect(entry.terminal).toBeNull();

    await advanceDbClock(pool, PAST_EXPIRY);
    d.network.offline = false;
    d.clock.advance(60_000);
    await d.client.sync();
    const truth = (await reactions(token, messageId)).body;
    // The 410 carries the operation's receipt: it applied, and the device says so (it never
    // shows "could not confirm in time" while it holds the receipt; issue 29 hole 6).
    expect(entry.terminal).toMatchObject({
      outcome: 'applied',
      code: 'operation_expired',
      reflected: 'present',
    });
    expect(entry.terminal?.message).toEqual(truth);
    expect(entry.terminal?.receipt?.operationId).toBe(entry.operationId);
    // Terminal: later passes send nothing for it.
    const sent = d.network.log.length;
    d.clock.advance(10 * 60_000);
    await d.client.sync();
    expect(d.network.log.length).toBe(sent);
    expect(recoveryFor(entry, 'en')).toBeNull();
    expect(recoveryFor(entry, 'vi')).toBeNull();
  });

  it('expiry after a write that never arrived: no receipt, so the words say it could not be confirmed, with the truth', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('PUT', WRITE, 'drop-request');
    const entry = await d.client.choose({ messageId, emoji: '✅', desired: 'present' });
    await d.client.sync(); // the write never reached the server; the device does not know
    await advanceDbClock(pool, PAST_EXPIRY);
    d.clock.advance(60_000);
    await d.client.sync();
    expect(entry.terminal).toMatchObject({ outcome: 'expired', receipt: null, reflected: 'absent' });
    const text = recoveryFor(entry, 'en')!;
    expect(text).toMatchObject({ kind: 'expired', action: 'react_again' });
    expect(text.body).toContain('currently does not show your ✅ reaction');
    expect(recoveryFor(entry, 'vi')!.body).toContain('hiện không hiển thị cảm xúc ✅');
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 0, fences: 0 });
  });

  it('expiry while offline before the write: the true state is exposed and no new operation is minted', async () => {
    const w = await seedWorld(2);
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('PUT', WRITE, 'drop-request');
    const entry = await d.client.choose({ messageId, emoji: '🔥', desired: 'present' });
    await d.client.sync(); // ticket issued, write never left
    d.network.offline = true;
    // Meanwhile someone else reacts, and the ticket's window passes.
    const bob = device();
    await bob.client.signIn({ actorId: w.actors[1]!, token: w.tokens[1]! });
    await bob.client.choose({ messageId, emoji: '🔥', desired: 'present' });
    await bob.client.sync();
    await advanceDbClock(pool, PAST_EXPIRY);

    d.network.offline = false;
    d.clock.advance(60_000);
    await d.client.sync();
    expect(entry.terminal).toMatchObject({ outcome: 'expired', reflected: 'absent' });
    expect(entry.terminal?.message?.reactions).toEqual([{ emoji: '🔥', count: 1, actorIds: [w.actors[1]] }]);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 0, fences: 0 });
    expect(d.network.count('POST', ISSUE)).toBe(1);

    // A new reaction is a new explicit choice: a new operation ID and ticket.
    const again = await d.client.choose(entry.intent);
    expect(again.operationId).not.toBe(entry.operationId);
    await d.client.sync();
    expect(again.terminal).toMatchObject({ outcome: 'applied', reflected: 'present' });
  });
});

describe('sign-out keeps the journal; sign-in reconciles it through the ticket contract', () => {
  const past = () => Math.floor(Date.now() / 1000) - 60;

  it('a journal from before sign-out is replayed after sign-in inside the admission window and applies once', async () => {
    const w = await seedWorld();
    const [actorId, messageId] = [w.actors[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token: await tokenFor(actorId, { issuedAt: past() }) });
    d.network.fault('PUT', WRITE, 'lose-response');
    const entry = await d.client.choose({ messageId, emoji: '🙏', desired: 'present' });
    const queued = await d.client.choose({ messageId, emoji: '🎉', desired: 'present' });
    d.network.fault('POST', ISSUE, 'drop-request');
    await d.client.sync(); // 🙏: issuance lost in the network; 🎉: applied, answer lost
    const signedOut = await signOut(actorId);

    // The old session is refused: the journal waits, untouched, for a sign-in.
    d.clock.advance(60_000);
    const report = await d.client.sync();
    expect(report.session).toBe('needs_sign_in');
    expect(entry.terminal).toBeNull();
    expect(queued.terminal).toBeNull();
    d.client.signOut();
    expect((await d.client.sync()).processed).toBe(0);
    expect(await d.client.pendingActors()).toEqual([actorId]);

    // Six days later (inside the 7-day window from the choices): app restart, then sign-in of
    // the same actor with a fresh token. Past the window they end terminally instead
    // (reconcile.forgotten: day 400).
    await elapse(pool, 6 * DAY_MS, d.clock);
    const next = device({ storage: d.storage, network: d.network, clock: d.clock });
    await next.client.signIn({ actorId, token: await tokenFor(actorId, { issuedAt: signedOut }) });
    await next.client.sync();
    const done = await next.client.entries();
    expect(done.map((e) => e.terminal?.outcome)).toEqual(['applied', 'applied']);
    expect(done[0]!.terminal?.receipt?.operationId).toBe(entry.operationId);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 2, receipts: 2, fences: 0 });
    expect(await next.client.pendingActors()).toEqual([]);
  });

  it('a signed-out journal whose tickets expired reconciles terminally with the true state', async () => {
    const w = await seedWorld();
    const [actorId, messageId] = [w.actors[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token: await tokenFor(actorId, { issuedAt: past() }) });
    d.network.fault('PUT', WRITE, 'drop-request');
    const entry = await d.client.choose({ messageId, emoji: '👏', desired: 'present' });
    await d.client.sync();
    d.client.signOut();
    const signedOut = await signOut(actorId);
    await advanceDbClock(pool, PAST_EXPIRY);

    const token = await tokenFor(actorId, { issuedAt: signedOut });
    await d.client.signIn({ actorId, token });
    d.clock.advance(60_000);
    await d.client.sync();
    expect(entry.terminal).toMatchObject({
      outcome: 'expired',
      code: 'operation_expired',
      reflected: 'absent',
    });
    expect(entry.terminal?.message).toEqual((await reactions(token, messageId)).body);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 0, fences: 0 });
  });

  it("another actor signing in on the device never replays the first actor's journal", async () => {
    const w = await seedWorld(2);
    const d = device();
    await d.client.signIn({ actorId: w.actors[0]!, token: w.tokens[0]! });
    d.network.offline = true;
    await d.client.choose({ messageId: w.messages[0]!, emoji: '🌟', desired: 'present' });
    await d.client.sync();
    d.client.signOut();
    d.network.offline = false;
    await d.client.signIn({ actorId: w.actors[1]!, token: w.tokens[1]! });
    expect(await d.client.entries()).toEqual([]);
    await d.client.sync();
    expect(d.network.log).toEqual([]);
    expect(await d.client.pendingActors()).toEqual([w.actors[0]]);
  });
});
