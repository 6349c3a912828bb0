import { runInDurableObject } from 'cloudflare:test';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { backendPid, testPool, waitUntilBlocked } from '../helpers/db';
import {
  admin,
  blockedBehind,
  closeLegacyContract,
  countRows,
  cronTick,
  DAY_MS,
  enable,
  owner,
  runOnce,
  seedDirectory,
  seedReceipts,
} from './helpers';

const pool = testPool();
const OLD = { ageMs: 40 * DAY_MS, expiredAgoMs: 33 * DAY_MS };

beforeAll(() => closeLegacyContract());
// Stopping is what these tests do; each starts enabled.
beforeEach(() => enable());
afterAll(() => pool.end());

describe('durable stop', () => {
  it('stop during a batch: acknowledged first, completes only after the admitted batch drains; after eviction a cron tick runs nothing', async () => {
    const d = await seedDirectory(pool);
    const ops = await seedReceipts(pool, d, 600, OLD);
    const before = await owner().status();
    const holder = await pool.connect();
    let stop: ReturnType<typeof admin>;
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

      stop = admin('POST', '/admin/retention/stop');
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
    expect(stopped.status).toBe(200);
    expect(stopped.body).toMatchObject({
      stopGeneration: before.stopGeneration + 1,
      enabled: false,
      drained: {
        batchInFlight: true,
        batch: { settled: 'completed', selected: 250, deleted: 250 },
        run: { outcome: 'stopped', batches: 1 },
      },
    });
    expect(stopped.body.completedAt).toBeGreaterThanOrEqual(stopped.body.acknowledgedAt);
    expect((await run).run).toMatchObject({ outcome: 'stopped', batches: 1, rowsDeleted: 250 });
    expect(await countRows(pool, d)).toMatchObject({ receipts: 350 });

    // Eviction: the object's memory is gone; its stored stop is not. Nothing is scheduled.
    await runInDurableObject(owner(), (_, state) => state.abort('evicted by test')).catch(() => undefined);
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

  it('a stop with no batch in flight says so and leaves nothing scheduled', async () => {
    const res = await admin('POST', '/admin/retention/stop');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      enabled: false,
      drained: { batchInFlight: false, batch: null, run: null },
    });
    const s = await owner().status();
    expect(s).toMatchObject({ enabled: false, alarmAt: null, stopAcknowledgedAt: res.body.acknowledgedAt });
  });

  it('admin routes require the admin token', async () => {
    for (const [method, path] of [
      ['POST', '/admin/retention/enable'],
      ['POST', '/admin/retention/stop'],
      ['GET', '/admin/retention/status'],
    ] as const) {
      const { exports } = await import('cloudflare:workers');
      const res = await exports.default.fetch(`http://test${path}`, { method });
      expect(res.status).toBe(401);
    }
    expect((await owner().status()).enabled).toBe(true);
  });
});
