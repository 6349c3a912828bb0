import { afterAll, describe, expect, it } from 'vitest';
import { type JournalEntry, ManualScheduler, statusOf } from '../../clients/mobile/src';
import { dbNowMs, testPool } from '../helpers/db';
import { reactions, seedWorld } from '../reaction-tickets/helpers';
import { device, HeldStore, ISSUE, serverRows, WRITE } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

/**
 * signOut() stops the step in flight: once its promise resolves, no request of that session
 * leaves the device. Each test parks the pass at a chosen point (a request held before or
 * after the server, or the journal write before the PUT), signs out, lets the parked step
 * go on, and counts what reached the Worker afterwards. The journal is kept: signing the
 * same actor back in finishes the choice once.
 */
/**
 * Whether `p` settles while the request stays held. The deadline is only a failure bound: a
 * sign-out that works resolves at once (nothing but microtasks), one that waits on the held
 * request never does.
 */
function settlesWhileHeld(p: Promise<unknown>): Promise<'resolved' | 'still waiting on the held request'> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bound = new Promise<'still waiting on the held request'>((r) => {
    timer = setTimeout(() => r('still waiting on the held request'), 2000);
  });
  return Promise.race([p.then(() => 'resolved' as const), bound]).finally(() => clearTimeout(timer));
}

async function world() {
  const w = await seedWorld();
  return { actorId: w.actors[0]!, token: w.tokens[0]!, messageId: w.messages[0]! };
}

describe('signOut() stops the step in flight', () => {
  it('a write held before the server is aborted: after signOut resolves, no request reaches the server', async () => {
    const { actorId, token, messageId } = await world();
    const d = device();
    await d.client.signIn({ actorId, token });
    const held = d.network.hold('PUT', WRITE, 'before-server');
    const entry = await d.client.choose({ messageId, emoji: '👍', desired: 'present' });
    const pass = d.client.sync();
    await held.reached;
    expect(await settlesWhileHeld(d.client.signOut())).toBe('resolved');
    const servedAtSignOut = d.network.served.length;
    held.release();
    await pass;
    expect(d.network.served.slice(servedAtSignOut)).toEqual([]);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 0, fences: 0 });
    // The write may have left before the abort: its outcome stays unknown, the intent kept.
    expect(statusOf(entry)).toBe('unconfirmed');
    expect(entry.attempts).toBe(0); // a stop is not a failed attempt

    await d.client.signIn({ actorId, token });
    await d.client.sync();
    expect(entry.terminal).toMatchObject({ outcome: 'applied', reflected: 'present' });
    expect(d.network.count('POST', ISSUE)).toBe(1);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
  });

  it('a ticket answer held after the server: the write that would follow it is never sent', async () => {
    const { actorId, token, messageId } = await world();
    const d = device();
    await d.client.signIn({ actorId, token });
    const held = d.network.hold('POST', ISSUE, 'after-server');
    const entry = await d.client.choose({ messageId, emoji: '🔥', desired: 'present' });
    const pass = d.client.sync();
    await held.reached; // the ticket exists on the server
    expect(await settlesWhileHeld(d.client.signOut())).toBe('resolved');
    const servedAtSignOut = d.network.served.length;
    held.release();
    await pass;
    expect(d.network.served.slice(servedAtSignOut)).toEqual([]);
    expect(d.network.count('PUT', WRITE)).toBe(0);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 0, fences: 0 });
    expect(entry).toMatchObject({ issueSent: true, writeSent: false, terminal: null });
    expect((await reactions(token, messageId)).body.reactions).toEqual([]);
  });

  it('signed out while the journal step before the write is saving: the write is never sent', async () => {
    const { actorId, token, messageId } = await world();
    const storage = new HeldStore();
    const d = device({ storage });
    await d.client.signIn({ actorId, token });
    const saving = storage.holdWrite((_key, value) => (JSON.parse(value) as JournalEntry).writeSent);
    const entry = await d.client.choose({ messageId, emoji: '🎯', desired: 'present' });
    const pass = d.client.sync();
    await saving.reached; // ticket in hand, `writeSent` being persisted, the PUT next
    const signedOut = d.client.signOut();
    const servedAtSignOut = d.network.served.length;
    saving.release();
    await signedOut;
    await pass;
    expect(d.network.served.slice(servedAtSignOut)).toEqual([]);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 0, fences: 0 });
    expect(entry.terminal).toBeNull();
  });

  it('signed out while a re-stamp is being journaled: the re-stamped issuance is never sent', async () => {
    const { actorId, token, messageId } = await world();
    const storage = new HeldStore();
    // The device clock is an hour fast: the first issuance is refused as skewed (422).
    const d = device({ storage, clock: new ManualScheduler((await dbNowMs(pool)) + 3_600_000) });
    await d.client.signIn({ actorId, token });
    const restamping = storage.holdWrite((_key, value) =>
      Boolean((JSON.parse(value) as JournalEntry).restampedFrom),
    );
    const entry = await d.client.choose({ messageId, emoji: '🧭', desired: 'present' });
    const firstId = entry.operationId;
    const pass = d.client.sync();
    await restamping.reached; // 422 answered, the new ID being persisted, its issuance next
    const signedOut = d.client.signOut();
    const servedAtSignOut = d.network.served.length;
    restamping.release();
    await signedOut;
    await pass;
    expect(d.network.served.slice(servedAtSignOut)).toEqual([]);
    expect(d.network.count('POST', ISSUE)).toBe(1);
    // `issueSent` is persisted before the request (it may have left, as far as the journal knows).
    expect(entry).toMatchObject({ restampedFrom: firstId, ticket: null, terminal: null });
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 0, receipts: 0, fences: 0 });

    // Signed back in: the re-stamped choice is issued and applies once.
    await d.client.signIn({ actorId, token });
    await d.client.sync();
    expect(entry.terminal).toMatchObject({ outcome: 'applied', reflected: 'present' });
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
  });

  it('a pass that has not started a step yet sends nothing after signOut resolves', async () => {
    const { actorId, token, messageId } = await world();
    const d = device();
    await d.client.signIn({ actorId, token });
    await d.client.choose({ messageId, emoji: '✅', desired: 'present' });
    const pass = d.client.sync(); // starts, then waits on the journal read
    await d.client.signOut();
    await pass;
    expect(d.network.served).toEqual([]);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 0, receipts: 0, fences: 0 });
  });
});
