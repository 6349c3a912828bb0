import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { backendPid, testPool, waitUntilBlocked } from '../helpers/db';
import {
  ACTOR,
  blockedBehind,
  closeLegacyContract,
  countRows,
  currentGeneration,
  DAY_MS,
  enable,
  inOwner,
  nextTickTime,
  owner,
  resetOwner,
  runOnce,
  seedDirectory,
  seedFences,
  seedReceipts,
} from './helpers';

const pool = testPool();
const OLD = { ageMs: 40 * DAY_MS, expiredAgoMs: 33 * DAY_MS };
const OLD_FENCE = { ageMs: 100 * DAY_MS, expiredAgoMs: 93 * DAY_MS };

beforeAll(async () => {
  await closeLegacyContract(pool);
  await enable();
});
// Tests below spend budgets, replace the owner's clock and leave a cursor behind.
beforeEach(() => resetOwner());
afterAll(() => pool.end());

async function status() {
  return owner().status();
}

describe('a run', () => {
  it('with nothing eligible finishes at once: one read, no batch', async () => {
    const before = await status();
    const r = await runOnce();
    expect(r).toMatchObject({ ran: true, reason: 'empty' });
    expect(r.run).toMatchObject({ batches: 0, rowsSelected: 0, rowsDeleted: 0, oldestEligibleAgeMs: null });
    const after = await status();
    expect(after.budgets.dbBatches.used).toBe(1);
    expect(after.history.length).toBe(before.history.length + 1);
  });

  it('does at most ten batches of 250 and resumes from the cursor at the next run, after an eviction', async () => {
    const d = await seedDirectory(pool);
    await seedReceipts(pool, d, 2600, OLD);
    await seedFences(pool, d, 10, OLD_FENCE);
    const first = await runOnce();
    expect(first.run).toMatchObject({
      outcome: 'batch_limit',
      batches: 10,
      rowsSelected: 2500,
      rowsDeleted: 2500,
    });
    expect(first.run!.oldestEligibleAgeMs).toBeGreaterThanOrEqual(OLD_FENCE.ageMs - 60_000);
    expect(await countRows(pool, d)).toEqual({ receipts: 100, fences: 10 });
    const cursor = (await status()).cursor;
    expect(cursor).toMatchObject({ table: 'receipts' });
    expect(Object.keys(cursor!).sort()).toEqual(['createdAt', 'table']);

    // The object is evicted between runs: its memory is gone, its stored cursor is not.
    await inOwner((_, state) => state.abort('evicted by test')).catch(() => undefined);
    const second = await runOnce();
    expect(second.run).toMatchObject({ outcome: 'complete', batches: 2, rowsDeleted: 110 });
    expect(await countRows(pool, d)).toEqual({ receipts: 0, fences: 0 });
    expect((await status()).cursor).toBeNull();
    expect((await runOnce()).reason).toBe('empty');
  });

  it('a redelivered tick is not a second run', async () => {
    const d = await seedDirectory(pool);
    await seedReceipts(pool, d, 10, OLD);
    const at = nextTickTime();
    expect((await runOnce(at)).run).toMatchObject({ outcome: 'complete', rowsDeleted: 10 });
    await seedReceipts(pool, d, 10, OLD);
    expect(await runOnce(at)).toEqual({ ran: false, reason: 'duplicate' });
    expect(await countRows(pool, d)).toMatchObject({ receipts: 10 });
    expect((await runOnce()).run).toMatchObject({ rowsDeleted: 10 });
  });

  it('records counts and ages only: nothing about actors, messages, emoji or operations', async () => {
    const d = await seedDirectory(pool);
    const ops = await seedReceipts(pool, d, 3, OLD);
    await runOnce();
    const { history } = await status();
    const text = JSON.stringify(history);
    for (const secret of [d.actorId, d.messageId, d.conversationId, d.workspaceId, ops[0]!, 'present'])
      expect(text).not.toContain(secret);
    expect(Object.keys(history[0]!).sort()).toEqual(
      [
        'batches',
        'durationMs',
        'error',
        'oldestEligibleAgeMs',
        'outcome',
        'rowsDeleted',
        'rowsSelected',
        'scheduledTime',
        'startedAt',
        'stopGeneration',
      ].sort(),
    );
  });
});

describe('eligibility', () => {
  it('rows inside their retention or inside the drain grace are never deleted', async () => {
    const d = await seedDirectory(pool);
    const young = await seedReceipts(pool, d, 5, { ageMs: 29 * DAY_MS, expiredAgoMs: 22 * DAY_MS });
    const inGrace = await seedReceipts(pool, d, 5, { ageMs: 40 * DAY_MS, expiredAgoMs: 30 * 60_000 });
    const due = await seedReceipts(pool, d, 5, { ageMs: 40 * DAY_MS, expiredAgoMs: 2 * 3_600_000 });
    // Legacy receipts: no ticket; the legacy contract drained moments ago (inside the grace).
    const legacy = await seedReceipts(pool, d, 5, { ageMs: 40 * DAY_MS, contract: 'legacy' });
    const youngFence = await seedFences(pool, d, 5, { ageMs: 80 * DAY_MS, expiredAgoMs: 73 * DAY_MS });
    const fenceInGrace = await seedFences(pool, d, 5, { ageMs: 100 * DAY_MS, expiredAgoMs: 30 * 60_000 });
    const dueFence = await seedFences(pool, d, 5, { ageMs: 100 * DAY_MS, expiredAgoMs: 2 * 3_600_000 });
    const r = await runOnce();
    expect(r.run).toMatchObject({ outcome: 'complete', rowsDeleted: 10 });
    const left = await pool.query<{ operation_id: string }>(
      `select operation_id from private.chat_reaction_operations where actor_id = $1
       union all select operation_id from private.chat_retired_reaction_operations where actor_id = $1`,
      [d.actorId],
    );
    const kept = new Set(left.rows.map((x) => x.operation_id));
    for (const id of [...young, ...inGrace, ...legacy, ...youngFence, ...fenceInGrace])
      expect(kept.has(id)).toBe(true);
    for (const id of [...due, ...dueFence]) expect(kept.has(id)).toBe(false);
  });
});

describe('bounds', () => {
  it('daily database and Worker operation budgets stop the run when spent, and roll over at 00:00 UTC', async () => {
    const d = await seedDirectory(pool);
    await seedReceipts(pool, d, 1000, OLD);
    const res = await owner().enable({
      actor: ACTOR,
      generation: await currentGeneration(),
      dbBatchBudget: 3,
      workerOpBudget: 2,
    });
    expect(res.enabled).toBe(true);
    // Budget 3: the probe and two batches, then the run stops.
    const first = await runOnce();
    expect(first.run).toMatchObject({ outcome: 'budget', batches: 2, rowsDeleted: 500 });
    const second = await runOnce();
    expect(second.run).toMatchObject({ outcome: 'budget', batches: 0, rowsDeleted: 0 });
    expect(await runOnce()).toMatchObject({ ran: false, reason: 'budget' });
    expect(await countRows(pool, d)).toMatchObject({ receipts: 500 });
    // The next UTC day brings fresh budgets; the cursor carries on.
    await inOwner((instance) => {
      const tomorrow = Date.now() + DAY_MS;
      instance.clock = { now: () => tomorrow };
    });
    expect((await runOnce()).run).toMatchObject({ outcome: 'budget', batches: 2, rowsDeleted: 500 });
    expect(await countRows(pool, d)).toMatchObject({ receipts: 0 });
  });

  it('budgets of 0 on enable are budgets of 0: no batch and no run, nothing deleted', async () => {
    const d = await seedDirectory(pool);
    await seedReceipts(pool, d, 10, OLD);
    const res = await owner().enable({
      actor: ACTOR,
      generation: await currentGeneration(),
      dbBatchBudget: 0,
      workerOpBudget: 0,
    });
    expect(res.enabled).toBe(true);
    expect((await status()).budgets).toMatchObject({
      dbBatches: { used: 0, limit: 0 },
      workerOps: { used: 0, limit: 0 },
    });
    expect(await runOnce()).toMatchObject({ ran: false, reason: 'budget' });
    expect(await countRows(pool, d)).toMatchObject({ receipts: 10 });
    // A database budget of 0 alone: the run starts and admits no batch.
    await owner().enable({
      actor: ACTOR,
      generation: await currentGeneration(),
      dbBatchBudget: 0,
      workerOpBudget: 5,
    });
    expect((await runOnce()).run).toMatchObject({ outcome: 'budget', batches: 0, rowsDeleted: 0 });
    expect(await countRows(pool, d)).toMatchObject({ receipts: 10 });
    // The rows this test kept are not the next test's to delete.
    await pool.query('delete from private.chat_reaction_operations where actor_id = $1', [d.actorId]);
  });

  it('stops at the fixed execution deadline; the next run resumes', async () => {
    const d = await seedDirectory(pool);
    await seedReceipts(pool, d, 2000, OLD);
    await inOwner((instance) => {
      // Every reading of the clock moves it 3 s: the 25 s deadline arrives after two batches.
      let t = Date.now();
      instance.clock = { now: () => (t += 3000) };
    });
    const first = await runOnce();
    expect(first.run!.outcome).toBe('deadline');
    expect(first.run!.batches).toBeGreaterThan(0);
    expect(first.run!.batches).toBeLessThan(10);
    expect(first.run!.rowsDeleted).toBe(first.run!.batches * 250);
    await resetOwner({ sweep: false });
    const second = await runOnce();
    expect(second.run).toMatchObject({ outcome: 'complete', rowsDeleted: 2000 - first.run!.rowsDeleted });
  });

  it('a failed batch (lock_timeout) ends the run with no retry; already deleted rows are a no-op', async () => {
    const d = await seedDirectory(pool);
    const ops = await seedReceipts(pool, d, 300, OLD);
    await inOwner((instance) => {
      // A short statement budget, so the blocked batch fails quickly (as production would at 5 s).
      (instance as unknown as { env: Record<string, unknown> }).env = {
        ...(instance as unknown as { env: Record<string, unknown> }).env,
        RETENTION_BATCH_TIMEOUT_MS: '300',
      };
    });
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      await holder.query(
        'select 1 from private.chat_reaction_operations where actor_id = $1 and operation_id = $2 for update',
        [d.actorId, ops[0]],
      );
      const r = await runOnce();
      expect(r.run).toMatchObject({ outcome: 'failed', batches: 0, rowsDeleted: 0 });
      expect(r.run!.error).toBe('55P03');
      // One probe and one batch were spent: the failure was not retried.
      expect((await status()).budgets.dbBatches.used).toBe(2);

      // Now the blocked batch meets a row that its holder deletes: a successful no-op. A new
      // instance has the production budget (abort always rejects: that is how it ends one),
      // so the batch is not timed out while the test is still getting to the delete.
      await inOwner((_, state) => state.abort('reset env')).catch(() => undefined);
      const pending = runOnce();
      await waitUntilBlocked(pool, await blockedBehind(pool, await backendPid(holder)));
      await holder.query(
        'delete from private.chat_reaction_operations where actor_id = $1 and operation_id = $2',
        [d.actorId, ops[0]],
      );
      await holder.query('commit');
      const second = await pending;
      expect(second.run).toMatchObject({ outcome: 'complete', error: null });
      expect(second.run!.rowsDeleted).toBe(299);
    } finally {
      holder.release();
      await inOwner((_, state) => state.abort('reset env')).catch(() => undefined);
    }
    expect(await countRows(pool, d)).toMatchObject({ receipts: 0 });
  });
});
