import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { addTypingBadge } from '../../workers/typing-ledger';
import { runMaintenancePasses } from '../../workers/typing-ledger/maintenance';
import { claimDue } from '../../workers/typing-ledger/passes/claim';
import { runExpiration } from '../../workers/typing-ledger/passes/expire';
import { runPruning } from '../../workers/typing-ledger/passes/prune';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';
import { register } from '../typing-ledger/helpers';
import {
  bulkRows,
  captureLogs,
  counts,
  keys,
  makeInstallation,
  newMessage,
  quietEmulator,
  row,
  trackWorkspaces,
  typingOf,
} from './helpers';

const DAY = 86_400_000;
const TWO_MIN = 120_000;
let pool: Pool;
const { ws, dropAll } = trackWorkspaces();
const lines = captureLogs();

beforeAll(async () => {
  pool = testPool(8);
  await quietEmulator();
});
afterEach(() => setDbClockOffset(pool, 0));
afterAll(async () => {
  await setDbClockOffset(pool, 0);
  await dropAll(pool);
  await quietEmulator(true);
  await pool.end();
});

describe('expiration pass', () => {
  it('a taskless indicator expires at exactly two minutes: badge withdrawal owed, input not settled', async () => {
    const w = ws();
    await bulkRows(pool, { workspaceId: w, n: 1, taskless: true });
    await bulkRows(pool, { workspaceId: w, n: 1, taskless: false });
    const scope = { workspaceIds: [w] };
    await advanceDbClock(pool, TWO_MIN - 1000);
    expect((await runExpiration(pool, { scope })).tasklessExpired).toBe(0);
    await advanceDbClock(pool, 1000);
    expect(await runExpiration(pool, { scope })).toMatchObject({ tasklessExpired: 1, expired: 0 });
    const { rows } = await pool.query(
      `select taskless, settled_by, retention_outcome, cleaned_at, abandoned_at, credential_snapshot is not null as has_snapshot,
              next_attempt_at <= app_now() as due
       from channel_typing_reaction where workspace_id = $1 order by taskless`,
      [w],
    );
    // The tasked input keeps its badge; the taskless one is due for withdrawal now.
    expect(rows[0]).toMatchObject({ taskless: false, settled_by: null, retention_outcome: null });
    expect(rows[1]).toMatchObject({
      taskless: true,
      settled_by: 'maintenance:taskless_expiry',
      retention_outcome: 'taskless_expired',
      cleaned_at: null,
      abandoned_at: null,
      has_snapshot: true,
      due: true,
    });
    // No settlement cutoff is written: the input itself stays unsettled for the engine.
    const { rows: cut } = await pool.query(
      'select count(*)::int as n from channel_typing_settlement where session_id like $1',
      [`${w}%`],
    );
    expect(cut[0].n).toBe(0);
    expect(lines.some((l) => l.includes('typing_taskless_indicators_expired') && l.includes(w))).toBe(true);
  });

  it('every indicator hits the seven-day lifetime: abandoned, snapshot erased, cleaned_at null, no more retries', async () => {
    const w = ws();
    const scope = { workspaceIds: [w] };
    // A running task, an uncertain Add, a pending Add, a permanent credential failure.
    await bulkRows(pool, { workspaceId: w, n: 1, addState: 'added', dueOffsetMs: null, slots: true });
    await bulkRows(pool, { workspaceId: w, n: 1, addState: 'uncertain', dueOffsetMs: 0 });
    await bulkRows(pool, { workspaceId: w, n: 1, addState: 'pending', dueOffsetMs: 0 });
    await bulkRows(pool, { workspaceId: w, n: 1, settled: true, dueOffsetMs: 0 });
    await advanceDbClock(pool, 7 * DAY - 1000);
    expect((await runExpiration(pool, { scope })).expired).toBe(0);
    await advanceDbClock(pool, 1000);
    expect((await runExpiration(pool, { scope })).expired).toBe(4);
    const { rows } = await pool.query(
      `select abandoned_at is not null as abandoned, cleaned_at, credential_snapshot, quota_slot, next_attempt_at, retention_outcome
       from channel_typing_reaction where workspace_id = $1`,
      [w],
    );
    for (const r of rows)
      expect(r).toEqual({
        abandoned: true,
        cleaned_at: null,
        credential_snapshot: null,
        quota_slot: null,
        next_attempt_at: null,
        retention_outcome: 'expired',
      });
    expect(await claimDue(pool, { scope })).toEqual([]);
    const warn = lines.find((l) => l.includes('"typing_indicators_expired"') && l.includes(w));
    expect(warn && JSON.parse(warn)).toMatchObject({ level: 'warn', workspaceId: w, count: 4 });
  });

  it('a late Add result cannot resurrect an expired row (lifetime and taskless expiry)', async () => {
    const inst = await makeInstallation(pool, ws());
    const scope = { workspaceIds: [inst.workspaceId] };
    const m1 = await newMessage();
    const m2 = await newMessage();
    const r1 = await register(pool, inst, { sessionId: uid('s'), messageId: m1, position: 1 });
    const r2 = await register(pool, inst, { sessionId: uid('s'), messageId: m2, position: 1 });
    if (r1.kind !== 'registered' || r2.kind !== 'registered') throw new Error('not registered');
    await advanceDbClock(pool, TWO_MIN);
    expect((await runExpiration(pool, { scope })).tasklessExpired).toBe(2);
    await advanceDbClock(pool, 7 * DAY);
    // Only r1 reaches the lifetime expiry with its Add still outstanding.
    await pool.query('update channel_typing_reaction set abandoned_at = null where id = $1', [r1.id]);
    await pool.query(
      `update channel_typing_reaction set settled_at = null, taskless = false, retention_outcome = null where id = $1`,
      [r1.id],
    );
    expect((await runExpiration(pool, { scope })).expired).toBe(2);
    // The Adds' results arrive now: each badge is placed, seen as ended, and withdrawn at once.
    expect(await addTypingBadge(pool, r1)).toBe('withdrawn_after_add');
    expect(await addTypingBadge(pool, r2)).toBe('withdrawn_after_add');
    for (const [id, m] of [
      [r1.id, m1],
      [r2.id, m2],
    ] as const) {
      const x = await row(pool, id);
      expect(x.abandoned_at).not.toBeNull();
      expect(x.cleaned_at).toBeNull();
      expect(x.credential_snapshot).toBeNull();
      expect(await typingOf(m, inst.appId)).toEqual([]);
    }
  });
});

describe('pruning pass', () => {
  it('deletes success and failure tombstones seven days after their terminal timestamp, never live rows', async () => {
    const w = ws();
    const scope = { workspaceIds: [w] };
    await bulkRows(pool, { workspaceId: w, n: 3, terminal: 'cleaned' });
    await bulkRows(pool, { workspaceId: w, n: 2, terminal: 'abandoned' });
    await bulkRows(pool, { workspaceId: w, n: 2, createdOffsetMs: -DAY });
    await advanceDbClock(pool, 7 * DAY - 1000);
    expect((await runPruning(pool, { scope })).pruned).toBe(0);
    await advanceDbClock(pool, 1000);
    expect((await runPruning(pool, { scope })).pruned).toBe(5);
    expect(await counts(pool, w)).toMatchObject({ total: 2, live: 2 });
  });
});

describe('budgets with a large backlog', () => {
  it('expiry and pruning each stop at 1,000 rows inside two seconds, before a retry backlog', async () => {
    const w = ws();
    const scope = { workspaceIds: [w] };
    await bulkRows(pool, { workspaceId: w, n: 3000, createdOffsetMs: -8 * DAY, dueOffsetMs: 0 });
    await bulkRows(pool, { workspaceId: w, n: 3000, terminal: 'cleaned', terminalOffsetMs: -8 * DAY });
    await bulkRows(pool, { workspaceId: w, n: 500, createdOffsetMs: -DAY, dueOffsetMs: -1000 });
    const report = await runMaintenancePasses(pool, { keys: keys(), scope });
    expect(report.expire).toMatchObject({ expired: 1000 });
    expect(report.prune).toMatchObject({ pruned: 1000 });
    expect((report.expire as { durationMs: number }).durationMs).toBeLessThan(2000);
    expect((report.prune as { durationMs: number }).durationMs).toBeLessThan(2000);
    // The retry backlog ran after them, capped at 100 (placeholder snapshots: permanent).
    expect(report.retry).toMatchObject({ claimed: 100, permanent: 100 });
  });

  it('expire.taskless_own_share: crash-lost taskless timers expire in the same pass as a lifetime backlog over the row limit', async () => {
    const w = ws();
    const scope = { workspaceIds: [w] };
    await bulkRows(pool, { workspaceId: w, n: 1200, createdOffsetMs: -8 * DAY });
    await bulkRows(pool, { workspaceId: w, n: 3, taskless: true, createdOffsetMs: -3 * 60_000 });
    // Both kinds share the 1,000 rows; the unused part of the taskless share goes to the backlog.
    expect(await runExpiration(pool, { scope })).toMatchObject({ tasklessExpired: 3, expired: 997 });
    expect(await runExpiration(pool, { scope })).toMatchObject({ tasklessExpired: 0, expired: 203 });
  });

  it('expiry skips rows another transaction holds instead of waiting for them', async () => {
    const w = ws();
    const scope = { workspaceIds: [w] };
    await bulkRows(pool, { workspaceId: w, n: 20, createdOffsetMs: -8 * DAY });
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      await holder.query(
        'select id from channel_typing_reaction where workspace_id = $1 order by id limit 5 for update',
        [w],
      );
      const r = await runExpiration(pool, { scope });
      expect(r.expired).toBe(15);
      expect(r.durationMs).toBeLessThan(1000);
    } finally {
      await holder.query('rollback');
      holder.release();
    }
    expect((await runExpiration(pool, { scope })).expired).toBe(5);
  });
});
