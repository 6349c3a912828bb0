import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import type { StopResult } from '../../workers/retention/types';
import { backendPid, testPool, waitUntilBlocked } from '../helpers/db';
import {
  ACTOR,
  blockedBehind,
  cleanupWorker,
  closeLegacyContract,
  countRows,
  cronTick,
  DAY_MS,
  type Directory,
  enable,
  inOwner,
  owner,
  resetOwner,
  runOnce,
  seedDirectory,
  seedReceipts,
} from './helpers';

const pool = testPool();

interface AtAnswer {
  /** The batch backend's transaction state, or null when it is in none (ended or gone). */
  batch: string | null;
  rows: { receipts: number; fences: number };
}

async function observe(d: Directory, pid: number): Promise<AtAnswer> {
  const { rows } = await pool.query<{ state: string }>(
    `select state from pg_stat_activity where pid = $1 and xact_start is not null`,
    [pid],
  );
  return { batch: rows[0]?.state ?? null, rows: await countRows(pool, d) };
}

/** Polls until backend `pid` has no transaction (it ended, or the backend is gone). */
async function waitUntilGone(pid: number): Promise<void> {
  await vi.waitFor(
    async () => {
      const { rows } = await pool.query(
        'select 1 from pg_stat_activity where pid = $1 and xact_start is not null',
        [pid],
      );
      expect(rows).toEqual([]);
    },
    { timeout: 20_000, interval: 20 },
  );
}
const OLD = { ageMs: 40 * DAY_MS, expiredAgoMs: 33 * DAY_MS };

beforeAll(() => closeLegacyContract(pool));
// Stopping is what these tests do; each starts enabled.
beforeEach(async () => {
  // Each test starts from an empty receipts table, a fresh sweep and fresh budgets: rows and
  // a cursor an earlier test left would change which row a test's batch meets first.
  await pool.query('delete from private.chat_reaction_operations');
  await enable();
  await resetOwner();
});
afterAll(() => pool.end());

describe('durable stop', () => {
  it('stop during a batch: acknowledged first, completes only after the admitted batch drains; after eviction a cron tick runs nothing', async () => {
    const d = await seedDirectory(pool);
    const ops = await seedReceipts(pool, d, 600, OLD);
    const before = await owner().status();
    const holder = await pool.connect();
    let stop: Promise<StopResult>;
    let run: ReturnType<typeof runOnce>;
    try {
      // Hold the first row of the first batch, so the batch's delete is admitted and blocks.
      await holder.query('begin');
      await holder.query(
        'select 1 from private.chat_reaction_operations where actor_id = $1 and operation_id = $2 for update',
        [d.actorId, ops[0]],
      );
      run = runOnce();
      await waitUntilBlocked(pool, await blockedBehind(pool, await backendPid(holder)));
      expect((await owner().status()).batchInFlight).toBe(true);

      stop = cleanupWorker().stop({ actor: ACTOR });
      // The new generation is persisted and execution disabled while the batch still waits.
      // Only the object knows when the stop got there (the request reaches it through the
      // Worker), so its status is read until it does; a stop that waited for the batch first
      // never gets there while the row is held, and this fails with the last status read.
      const acked = await vi.waitFor(
        async () => {
          const s = await owner().status();
          expect(s).toMatchObject({ stopGeneration: before.stopGeneration + 1, enabled: false });
          return s;
        },
        { timeout: 10_000, interval: 10 },
      );
      expect(acked.batchInFlight).toBe(true);
      expect(await countRows(pool, d)).toMatchObject({ receipts: 600 });
    } finally {
      await holder.query('commit');
      holder.release();
    }
    const stopped = await stop;
    expect(stopped).toMatchObject({
      confirmed: true,
      stopGeneration: before.stopGeneration + 1,
      enabled: false,
      drained: {
        batchInFlight: true,
        batch: { settled: 'completed', selected: 250, deleted: 250 },
        run: { outcome: 'stopped', batches: 1 },
      },
    });
    if (!stopped.confirmed) throw new Error('unconfirmed');
    expect(stopped.completedAt).toBeGreaterThanOrEqual(stopped.acknowledgedAt);
    expect((await run).run).toMatchObject({ outcome: 'stopped', batches: 1, rowsDeleted: 250 });
    expect(await countRows(pool, d)).toMatchObject({ receipts: 350 });

    // Eviction: the object's memory is gone; its stored stop is not. Nothing is scheduled.
    await inOwner((_, state) => state.abort('evicted by test')).catch(() => undefined);
    const afterEviction = await owner().status();
    expect(afterEviction).toMatchObject({
      enabled: false,
      running: false,
      batchInFlight: false,
      alarmAt: null,
    });
    const runs = afterEviction.history.length;
    await cronTick();
    await cronTick();
    expect(await countRows(pool, d)).toMatchObject({ receipts: 350 });
    const after = await owner().status();
    expect(after.history.length).toBe(runs);
    expect(after.alarmAt).toBeNull();
    expect(await runOnce()).toEqual({ ran: false, reason: 'disabled' });
  });

  it('a stop after the object was reset mid-batch answers only once that batch can no longer commit', async () => {
    const d = await seedDirectory(pool);
    const ops = await seedReceipts(pool, d, 300, OLD);
    const holder = await pool.connect();
    let stopping: Promise<{ res: StopResult; atAnswer: AtAnswer }>;
    let batchPid: number;
    try {
      await holder.query('begin');
      await holder.query(
        'select 1 from private.chat_reaction_operations where actor_id = $1 and operation_id = $2 for update',
        [d.actorId, ops[0]],
      );
      // The run of this incarnation: its first batch is admitted and waits on the held row.
      const run = runOnce().catch((err: unknown) => err);
      batchPid = await blockedBehind(pool, await backendPid(holder));
      await waitUntilBlocked(pool, batchPid);

      // The object is reset: its memory (the batch in flight, the run) is gone; the batch's
      // transaction is not.
      await inOwner((_, state) => state.abort('reset by test')).catch(() => undefined);
      await run;

      stopping = cleanupWorker()
        .stop({ actor: ACTOR })
        .then(async (res) => ({
          res,
          atAnswer: await observe(d, batchPid),
        }));
      // Either the stop answers at once (then it answered with the batch still open), or it
      // waits for that batch: something queues behind the batch's backend.
      await Promise.race([stopping, blockedBehind(pool, batchPid)]);
    } finally {
      await holder.query('commit');
      holder.release();
    }
    const { res, atAnswer } = await stopping;
    expect(res).toMatchObject({ confirmed: true, enabled: false });
    expect(atAnswer.batch, 'a batch transaction was still open when the stop answered').toBeNull();
    // Whatever that batch did, it did before the answer: nothing changes after it.
    await waitUntilGone(batchPid);
    expect(await countRows(pool, d)).toEqual(atAnswer.rows);
    expect(await runOnce()).toEqual({ ran: false, reason: 'disabled' });
  });

  it("the database's generation alone stops a batch: a run admitted by the object deletes nothing after the row moved", async () => {
    const d = await seedDirectory(pool);
    await seedReceipts(pool, d, 300, OLD);
    const holder = await pool.connect();
    let run: ReturnType<typeof runOnce>;
    try {
      // The object admits the run and its probe reads the generation (a plain read passes the
      // held row); the first batch then queues for its share lock on the control row. The row
      // moves under that wait, as a stop written straight to the database would, and the batch
      // must see it. (Moving it while a batch already holds its share lock is not forced:
      // when that batch commits, the waiting update and the run's next share lock race, and
      // Postgres does not queue a share locker behind a waiting updater; either order keeps
      // "nothing after the stop", which the reset test above checks.)
      await holder.query('begin');
      await holder.query('select 1 from private.retention_control for update');
      run = runOnce();
      await blockedBehind(pool, await backendPid(holder));
      await holder.query('update private.retention_control set generation = generation + 1, enabled = false');
      await holder.query('commit');
    } finally {
      holder.release();
    }
    expect((await run).run).toMatchObject({ outcome: 'stopped', batches: 0, rowsDeleted: 0 });
    expect(await countRows(pool, d)).toMatchObject({ receipts: 300 });
  });

  it('a rollback is a stop first: its answer waits for the batch in flight, then the cursor is cleared', async () => {
    const d = await seedDirectory(pool);
    const ops = await seedReceipts(pool, d, 600, OLD);
    // A first run leaves a cursor behind (budget 2: the probe and one batch).
    await inOwner((_, state) =>
      state.storage.sql.exec('update cleanup_state set db_batch_budget = 2, db_batches_used = 0'),
    );
    expect((await runOnce()).run).toMatchObject({ outcome: 'budget', batches: 1 });
    expect((await owner().status()).cursor).not.toBeNull();
    await inOwner((_, state) =>
      state.storage.sql.exec('update cleanup_state set db_batch_budget = null, db_batches_used = 0'),
    );
    const holder = await pool.connect();
    let rollingBack: ReturnType<ReturnType<typeof cleanupWorker>['rollback']>;
    let run: ReturnType<typeof runOnce>;
    try {
      await holder.query('begin');
      await holder.query(
        'select 1 from private.chat_reaction_operations where actor_id = $1 and operation_id = $2 for update',
        [d.actorId, ops[300]],
      );
      run = runOnce();
      const batchPid = await blockedBehind(pool, await backendPid(holder));
      rollingBack = cleanupWorker().rollback({ actor: ACTOR });
      // The rollback's database fence queues behind the batch that holds the control row.
      await waitUntilBlocked(pool, await blockedBehind(pool, batchPid));
      expect(await owner().status()).toMatchObject({ enabled: false, batchInFlight: true });
    } finally {
      await holder.query('commit');
      holder.release();
    }
    const rolledBack = await rollingBack;
    expect(rolledBack.stop).toMatchObject({
      confirmed: true,
      enabled: false,
      drained: { batchInFlight: true, batch: { settled: 'completed' }, run: { outcome: 'stopped' } },
    });
    expect(rolledBack.legacyContract).toMatchObject({ open: false, closedAndDrained: true });
    expect((await run).run).toMatchObject({ outcome: 'stopped' });
    expect(await owner().status()).toMatchObject({
      enabled: false,
      cursor: null,
      control: { enabled: false },
    });
  });

  it('a stop with no batch in flight says so and leaves nothing scheduled', async () => {
    const res = await cleanupWorker().stop({ actor: ACTOR });
    expect(res).toMatchObject({
      confirmed: true,
      enabled: false,
      drained: { batchInFlight: false, batch: null, run: null },
    });
    const s = await owner().status();
    expect(s).toMatchObject({ enabled: false, alarmAt: null, stopAcknowledgedAt: res.acknowledgedAt });
  });
});
