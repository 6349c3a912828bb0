import { afterAll, describe, expect, it } from 'vitest';
import type { Intent, JournalEntry } from '../../clients/mobile/src';
import { testPool } from '../helpers/db';
import { reactions, seedWorld } from '../reaction-tickets/helpers';
import { device, HeldStore, ISSUE, serverRows, WRITE } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

/**
 * Two quick choices on one reaction: `choose()` journals, then marks older unfinished
 * choices replaced. "Newer" is the order in which choose() was called (the journal's
 * sequence, assigned when the choice is journaled), never the order in which the journaling
 * steps happen to finish, so the newest choice is the one the server ends with.
 */
async function world() {
  const w = await seedWorld();
  return { actorId: w.actors[0]!, token: w.tokens[0]!, messageId: w.messages[0]! };
}

/** Matches the journaling write of a new choice with `desired` (as the journal writes it). */
const savingChoice = (desired: Intent['desired']) => (_key: string, value: string) => {
  const e = JSON.parse(value) as JournalEntry;
  return e.intent.desired === desired && e.supersededBy === null && e.terminal === null;
};

async function syncUntilIdle(d: ReturnType<typeof device>): Promise<void> {
  for (let i = 0; i < 10; i += 1) {
    d.clock.advance(60_000);
    const report = await d.client.sync();
    if (report.waiting === 0 && report.processed === 0) return;
  }
}

describe('two quick choices on the same reaction: the newest always wins', () => {
  it('choices made at once (neither awaited): only the older is replaced and the newest is applied', async () => {
    const { actorId, token, messageId } = await world();
    const d = device();
    await d.client.signIn({ actorId, token });
    await d.client.choose({ messageId, emoji: '👍', desired: 'present' });
    await d.client.sync();
    const [older, newer] = await Promise.all([
      d.client.choose({ messageId, emoji: '👍', desired: 'present' }),
      d.client.choose({ messageId, emoji: '👍', desired: 'absent' }),
    ]);
    // The reaction is on the message when the two choices arrive; the newest removes it.
    await syncUntilIdle(d);
    expect((await reactions(token, messageId)).body.reactions).toEqual([]);
    expect(newer.terminal).toMatchObject({ outcome: 'applied', reflected: 'absent' });
    expect(older.terminal?.outcome).toBe('superseded');
    expect(newer.seq).toBeGreaterThan(older.seq);
    expect(older.supersededBy).toBe(newer.operationId);
    expect(newer.supersededBy).toBeNull();
    // The older one never left the device: the first choice's and the newest's operations only.
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 2, receipts: 2, fences: 0 });
  });

  it("cold start: the older choice's first read (the stored clock offset) answers last; the newest still wins", async () => {
    const { actorId, token, messageId } = await world();
    const storage = new HeldStore();
    const d = device({ storage });
    await d.client.signIn({ actorId, token });
    // A fresh client has read nothing yet: each choice's stamp reads the stored clock offset.
    // The older choice's read is held until the newer choice has journaled completely.
    const clockRead = storage.holdRead((key) => key.startsWith('reaction-clock/'));
    const olderP = d.client.choose({ messageId, emoji: '🧊', desired: 'present' });
    await clockRead.reached;
    const newer = await d.client.choose({ messageId, emoji: '🧊', desired: 'absent' });
    clockRead.release();
    const older = await olderP;
    expect(newer.seq).toBeGreaterThan(older.seq);
    expect(older.supersededBy).toBe(newer.operationId);
    expect(newer.supersededBy).toBeNull();
    await syncUntilIdle(d);
    expect(newer.terminal).toMatchObject({ outcome: 'applied', reflected: 'absent' });
    expect(older.terminal?.outcome).toBe('superseded');
    expect((await reactions(token, messageId)).body.reactions).toEqual([]);
    expect(d.network.count('POST', ISSUE)).toBe(1); // the older never left the device
  });

  for (const finishesFirst of ['newer', 'older'] as const) {
    it(`the ${finishesFirst} choice's journaling finishes first (forced): the newest is still what the server ends with`, async () => {
      const { actorId, token, messageId } = await world();
      const storage = new HeldStore();
      const d = device({ storage });
      await d.client.signIn({ actorId, token });
      // Hold the first journal write of the choice that must finish last.
      const slow = finishesFirst === 'newer' ? 'present' : 'absent';
      const held = storage.holdWrite(savingChoice(slow));
      const olderP = d.client.choose({ messageId, emoji: '🎉', desired: 'present' });
      const newerP = d.client.choose({ messageId, emoji: '🎉', desired: 'absent' });
      await held.reached;
      // The other choice journals completely (and marks whatever it takes to be older).
      const fast = await (finishesFirst === 'newer' ? newerP : olderP);
      expect(fast.intent.desired).toBe(finishesFirst === 'newer' ? 'absent' : 'present');
      held.release();
      const [older, newer] = await Promise.all([olderP, newerP]);
      expect(older.supersededBy).toBe(newer.operationId);
      expect(newer.supersededBy).toBeNull();
      await syncUntilIdle(d);
      expect([older.terminal?.outcome, newer.terminal?.outcome]).toEqual(['superseded', 'applied']);
      expect((await reactions(token, messageId)).body.reactions).toEqual([]);
      expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
      // A restart reads the same order back from the disk.
      const again = device({ storage });
      await again.client.signIn({ actorId, token });
      const persisted = await again.client.entries();
      expect(persisted.map((e) => [e.intent.desired, e.terminal?.outcome])).toEqual([
        ['present', 'superseded'],
        ['absent', 'applied'],
      ]);
    });
  }

  it('two quick choices while an older one is in flight: the in-flight one is retired, the newest applied', async () => {
    const { actorId, token, messageId } = await world();
    const d = device();
    await d.client.signIn({ actorId, token });
    // The reaction is on the message to begin with.
    const first = await d.client.choose({ messageId, emoji: '🔥', desired: 'present' });
    await d.client.sync();
    expect(first.terminal?.outcome).toBe('applied');

    const issuing = d.network.hold('POST', ISSUE, 'after-server');
    const a = await d.client.choose({ messageId, emoji: '🔥', desired: 'absent' });
    const pass = d.client.sync();
    await issuing.reached; // a's ticket exists on the server; its answer is held
    const [b, c] = await Promise.all([
      d.client.choose({ messageId, emoji: '🔥', desired: 'present' }),
      d.client.choose({ messageId, emoji: '🔥', desired: 'absent' }),
    ]);
    expect([a.supersededBy, b.supersededBy, c.supersededBy]).toEqual([b.operationId, c.operationId, null]);
    issuing.release();
    await pass;
    await syncUntilIdle(d);
    expect([a, b, c].map((e) => e.terminal?.outcome)).toEqual(['superseded', 'superseded', 'applied']);
    expect(c.terminal?.reflected).toBe('absent');
    expect((await reactions(token, messageId)).body.reactions).toEqual([]);
    // a was retired through the contract (a fence), b never left the device.
    expect(d.network.count('PUT', WRITE)).toBe(2); // first, c
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 3, receipts: 2, fences: 1 });
  });
});
