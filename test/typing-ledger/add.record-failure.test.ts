import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { deleteInstallation, type Installation } from '../../workers/installations/store';
import { addTypingBadge } from '../../workers/typing-ledger';
import { runRemoteRetry } from '../../workers/typing-ledger/passes/retry';
import { holdRows } from '../effects/row-locks';
import { advanceDbClock, blockedBehind, setDbClockOffset, testPool, uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { emu, releaseHeld, untilHeld } from '../lark/helpers';
import { quietEmulator, trackWorkspaces } from '../typing-maintenance/helpers';
import { keys, makeInstallation, newMessage, register, registeredId, row, typingOf } from './helpers';

/**
 * Issue 14 item 3: a successful Add whose recording fails is withdrawn at once with the
 * credentials in hand, or left due for the next retry pass with its reaction id; a
 * withdrawal that fails right after an Add is scheduled with backoff (and Lark's reset)
 * instead of waiting for the turn to settle. The recording fails for real: another
 * connection holds the ledger row's lock, so the Add's bounded update runs out of budget.
 */
let pool: Pool;
const { track, dropAll } = trackWorkspaces();
const held: { end(): Promise<void> }[] = [];

beforeAll(() => {
  pool = testPool(8);
});
beforeEach(() => quietEmulator());
afterEach(async () => {
  for (const h of held.splice(0)) await h.end();
  await emu('faults', undefined, 'DELETE');
  await setDbClockOffset(pool, 0);
});
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

const dueInSeconds = async (id: string) => {
  const { rows } = await pool.query<{ s: number | null }>(
    'select extract(epoch from next_attempt_at - app_now())::float8 as s from channel_typing_reaction where id = $1',
    [id],
  );
  return rows[0]!.s;
};

describe('the recording of a successful Add fails', () => {
  it('the badge is withdrawn at once by its reaction id and the row closed', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    const holder = await holdRows(pool, held, [['channel_typing_reaction', registeredId(reg)]]);
    // Lark holds the withdrawal: it arrives only once the recording has failed.
    await emu('faults', { route: 'reactions.delete', kind: 'hold' });
    const logs = captureLogLines();
    const adding = addTypingBadge(pool, reg, { recordBudgetMs: 500 });
    try {
      await blockedBehind(pool, holder.pid); // the recording waits on our lock...
      await untilHeld('reactions.delete'); // ...ran out of budget, and the withdrawal went out
    } finally {
      await holder.release();
    }
    await releaseHeld();
    expect(await adding.finally(logs.restore)).toBe('record_failed');

    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
    expect(await row(pool, registeredId(reg))).toMatchObject({
      cleaned_at: expect.any(Date),
      credential_snapshot: null,
      quota_slot: null,
      next_attempt_at: null,
    });
    expect(logs.events('typing_add_record_failed')).toEqual([
      expect.objectContaining({
        rowId: registeredId(reg),
        error: expect.objectContaining({ code: expect.stringMatching(/^(55P03|57014)$/) }),
      }),
    ]);
  });

  it('when that withdrawal fails too (429, reset 60 s), the row keeps its reaction id and is due for the retry pass after the reset, which removes the badge', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    const holder = await holdRows(pool, held, [['channel_typing_reaction', registeredId(reg)]]);
    await emu('faults', { route: 'reactions.delete', kind: 'hold' });
    await emu('faults', { route: 'reactions.delete', kind: '429', resetSeconds: 60 });
    const adding = addTypingBadge(pool, reg, { recordBudgetMs: 500 });
    try {
      await blockedBehind(pool, holder.pid);
      await untilHeld('reactions.delete');
    } finally {
      await holder.release();
    }
    await releaseHeld();
    expect(await adding).toBe('record_failed');

    const [badge] = await typingOf(messageId, inst.appId);
    expect(badge).toBeDefined();
    const r = await row(pool, registeredId(reg));
    expect(r).toMatchObject({
      reaction_id: badge!.reaction_id,
      add_state: 'added',
      settled_at: null,
      cleaned_at: null,
      last_error: 'withdraw:retryable:99991400',
    });
    expect(await dueInSeconds(r.id)).toBeGreaterThanOrEqual(59);

    const scope = { workspaceIds: [inst.workspaceId] };
    expect(await runRemoteRetry(pool, { keys: keys(), scope })).toMatchObject({ claimed: 0 });
    await advanceDbClock(pool, 61_000);
    expect(await runRemoteRetry(pool, { keys: keys(), scope })).toMatchObject({ claimed: 1, cleaned: 1 });
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
  });
});

describe('a withdrawal that fails right after an Add', () => {
  it('is scheduled with backoff honouring the 429 reset, not left for a settlement that may never come', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    // The installation is gone: revalidation ends the input, but nothing settles its row.
    await deleteInstallation(pool, inst.id);
    await emu('faults', { route: 'reactions.delete', kind: '429', resetSeconds: 60 });
    expect(await addTypingBadge(pool, reg)).toBe('withdrawn_after_add');

    const r = await row(pool, registeredId(reg));
    expect(r).toMatchObject({
      settled_at: null,
      cleaned_at: null,
      last_error: 'withdraw:retryable:99991400',
    });
    expect(r.reaction_id).toBe((await typingOf(messageId, inst.appId))[0]!.reaction_id);
    expect(await dueInSeconds(r.id)).toBeGreaterThanOrEqual(59);

    await advanceDbClock(pool, 61_000);
    const scope = { workspaceIds: [inst.workspaceId] };
    expect(await runRemoteRetry(pool, { keys: keys(), scope })).toMatchObject({ claimed: 1, cleaned: 1 });
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
  });

  it('a 5xx withdrawal is scheduled for the first retry (30 s)', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    await deleteInstallation(pool, inst.id);
    await emu('faults', { route: 'reactions.delete', kind: '5xx', status: 502 });
    expect(await addTypingBadge(pool, reg)).toBe('withdrawn_after_add');
    const r = await row(pool, registeredId(reg));
    expect(r.last_error).toBe('withdraw:retryable:502');
    const due = await dueInSeconds(r.id);
    expect(due).toBeGreaterThan(25);
    expect(due).toBeLessThanOrEqual(30);
  });
});
