import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Installation } from '../../workers/installations/store';
import { addTypingBadge, QUOTA_SLOTS, type Registration } from '../../workers/typing-ledger';
import { testPool, uid } from '../helpers/db';
import { emu } from '../lark/helpers';
import { callCounts, quietEmulator, trackWorkspaces } from '../typing-maintenance/helpers';
import { makeInstallation, newMessage, register, registeredId, row, typingOf } from './helpers';

/**
 * Issue 14 item 1: an Add that Lark definitely refused frees its quota slot at once; an
 * ambiguous failure keeps it (an empty sweep cannot acknowledge an unfinished Add).
 */
let pool: Pool;
const { track, dropAll } = trackWorkspaces();

beforeAll(() => {
  pool = testPool(12);
});
beforeEach(() => quietEmulator());
afterEach(() => emu('faults', undefined, 'DELETE'));
afterAll(async () => {
  await dropAll(pool);
  await quietEmulator(true);
  await pool.end();
});

async function install(): Promise<Installation> {
  const inst = await makeInstallation(pool);
  track(inst.workspaceId);
  return inst;
}

/** Takes `n` of the workspace's slots with rows that have no badge and never will. */
async function fillSlots(inst: Installation, n: number) {
  await pool.query(
    `insert into channel_typing_reaction (id, workspace_id, installation_id, app_id, session_id,
       source_message_id, input_position, context_revision, quota_slot, expires_at)
     select 'fill_' || $1 || s, $2, $3, $4, 'fill', 'om_fill_' || $1 || s, s, 0, s, app_now() + interval '7 days'
     from generate_series(1, $5::int) s`,
    [uid('f'), inst.workspaceId, inst.id, inst.appId, n],
  );
}

describe('a definite refusal frees its slot', () => {
  it('a burst of rate-limited Adds (429, 99991400) consumes no slots: each row is closed as refused and a new registration gets a slot', async () => {
    const inst = await install();
    await fillSlots(inst, QUOTA_SLOTS - 5);
    const session = uid('s');
    // Registered one after another: concurrent registrations for the last free slots may
    // collide (`contended`), which is another test's subject.
    const burst: Registration[] = [];
    for (const position of [1, 2, 3, 4, 5])
      burst.push(await register(pool, inst, { sessionId: session, messageId: await newMessage(), position }));
    // Reset 0: every Add of the burst reaches Lark and is refused (no durable gate involved).
    await emu('faults', { route: 'reactions.create', kind: '429', resetSeconds: 0, times: 5 });
    expect(await Promise.all(burst.map((r) => addTypingBadge(pool, r)))).toEqual(Array(5).fill('not_added'));
    expect((await callCounts())['reactions.create']).toBe(5);
    for (const r of burst)
      expect(await row(pool, registeredId(r))).toMatchObject({
        add_state: 'not_added',
        quota_slot: null,
        credential_snapshot: null,
        cleaned_at: expect.any(Date),
        abandoned_at: null,
        next_attempt_at: null,
        last_error: 'add:refused:99991400',
      });
    // The five slots are free again: the next input of the workspace gets its badge.
    const messageId = await newMessage();
    const next = await register(pool, inst, { sessionId: session, messageId, position: 6 });
    expect(next.kind).toBe('registered');
    expect(await addTypingBadge(pool, next)).toBe('added');
    expect(await typingOf(messageId, inst.appId)).toHaveLength(1);
  });

  it('a token Lark still refuses after the one refresh (99991663 twice) closes the row as refused', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: 'expired_token', times: 2 });
    expect(await addTypingBadge(pool, reg)).toBe('not_added');
    expect(await row(pool, registeredId(reg))).toMatchObject({
      add_state: 'not_added',
      quota_slot: null,
      credential_snapshot: null,
      last_error: 'add:refused:99991663',
    });
  });
});

describe('an ambiguous failure keeps its slot', () => {
  it('a 5xx Add stays uncertain and holds its slot: with the quota full, the next registration is skipped', async () => {
    const inst = await install();
    await fillSlots(inst, QUOTA_SLOTS - 1);
    const session = uid('s');
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: '5xx', status: 503 });
    expect(await addTypingBadge(pool, reg)).toBe('uncertain');
    const r = await row(pool, registeredId(reg));
    expect(r).toMatchObject({ add_state: 'uncertain', cleaned_at: null, last_error: 'add:uncertain:503' });
    expect(r.quota_slot).not.toBeNull();
    expect(r.credential_snapshot).not.toBeNull();
    // Claimable for a sweep one minute after registration, not before.
    expect(r.next_attempt_at!.getTime() - r.created_at.getTime()).toBe(60_000);
    const next = await register(pool, inst, {
      sessionId: session,
      messageId: await newMessage(),
      position: 2,
    });
    expect(next).toEqual({ kind: 'skipped', reason: 'quota_full' });
  });

  it('a lost response stays uncertain with its slot (the Add was applied)', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
    expect(await addTypingBadge(pool, reg)).toBe('uncertain');
    const r = await row(pool, registeredId(reg));
    expect(r).toMatchObject({ add_state: 'uncertain', cleaned_at: null, last_error: 'add:uncertain:0' });
    expect(r.quota_slot).not.toBeNull();
    expect(await typingOf(messageId, inst.appId)).toHaveLength(1);
  });
});
