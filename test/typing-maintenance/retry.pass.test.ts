import type { Pool } from '@neondatabase/serverless';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../workers/clock';
import { claimDue } from '../../workers/typing-ledger/passes/claim';
import { BACKOFF_BASE_MS, BACKOFF_MAX_MS } from '../../workers/typing-ledger/passes/limits';
import { runRemoteRetry } from '../../workers/typing-ledger/passes/retry';
import { setDbClockOffset, testPool } from '../helpers/db';
import { emu } from '../lark/helpers';
import {
  bulkRows,
  callCounts,
  counts,
  keys,
  liveRows,
  makeInstallation,
  quietEmulator,
  row,
  trackWorkspaces,
  typingOf,
} from './helpers';

let pool: Pool;
const { ws, dropAll } = trackWorkspaces();

/** The spec's backoff after the n-th claim (1-based): 30 s · 2^(n-1), at most one hour. */
const backoffAfterClaim = (claims: number) =>
  Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** Math.max(0, claims - 1));

beforeAll(() => {
  pool = testPool(12);
});
beforeEach(() => quietEmulator());
afterAll(async () => {
  await setDbClockOffset(pool, 0);
  await dropAll(pool);
  await quietEmulator(true);
  await pool.end();
});

describe('remote-retry claim', () => {
  it('claims at most 100 rows, and two concurrent workers never claim the same row in one window', async () => {
    const w = ws();
    await bulkRows(pool, { workspaceId: w, n: 350, dueOffsetMs: -1000 });
    const scope = { workspaceIds: [w] };
    // SKIP LOCKED passes over the other claim's rows, so with 350 due each gets a full 100.
    const [a, b] = await Promise.all([claimDue(pool, { scope }), claimDue(pool, { scope })]);
    expect([a.length, b.length]).toEqual([100, 100]);
    const ids = new Set([...a, ...b].map((r) => r.id));
    expect(ids.size).toBe(200);
    // A lone claim with 150 still due is capped too; the next one takes the remaining 50.
    const c = await claimDue(pool, { scope });
    expect(c).toHaveLength(100);
    const d = await claimDue(pool, { scope });
    expect(d).toHaveLength(50);
    expect(new Set([...ids, ...c.map((r) => r.id), ...d.map((r) => r.id)]).size).toBe(350);
    // Every claim moved its row's next attempt: the window holds nothing more.
    expect(await claimDue(pool, { scope })).toEqual([]);
    const { rows } = await pool.query<{ n: number }>(
      'select count(*)::int as n from channel_typing_reaction where workspace_id = $1 and attempts = 1',
      [w],
    );
    expect(rows[0]!.n).toBe(350);
  });

  it('SKIP LOCKED: a claim passes over rows another worker holds, without waiting', async () => {
    const w = ws();
    await bulkRows(pool, { workspaceId: w, n: 30, dueOffsetMs: -1000 });
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      const { rows: held } = await holder.query<{ id: string }>(
        `select id from channel_typing_reaction where workspace_id = $1 order by id limit 10 for update`,
        [w],
      );
      const claimed = await claimDue(pool, { scope: { workspaceIds: [w] } });
      expect(claimed).toHaveLength(20);
      const heldIds = new Set(held.map((r) => r.id));
      expect(claimed.some((r) => heldIds.has(r.id))).toBe(false);
    } finally {
      await holder.query('rollback');
      holder.release();
    }
  });

  it('a write-back never waits on a claim: the claim holds its locks for one statement only', async () => {
    const w = ws();
    await bulkRows(pool, { workspaceId: w, n: 5, dueOffsetMs: -1000 });
    // A writer locks the rows first; the claim statement skips, it does not block.
    const writer = await pool.connect();
    const claimer = await pool.connect();
    try {
      await writer.query('begin');
      await writer.query(
        `update channel_typing_reaction set updated_at = app_now() where workspace_id = $1`,
        [w],
      );
      // Any lock wait at all fails the claim at once (55P03) instead of hanging the test: the
      // claim must skip the writer's rows, never queue behind them.
      await claimer.query(`set lock_timeout = '1ms'`);
      const claimed = await claimDue(claimer, { scope: { workspaceIds: [w] } });
      await claimer.query('reset lock_timeout');
      expect(claimed).toEqual([]);
      await writer.query('rollback');
      expect(await claimDue(claimer, { scope: { workspaceIds: [w] } })).toHaveLength(5);
      // And after the claim returned, nothing of ours is locked: a plain update goes through.
      await claimer.query(
        `update channel_typing_reaction set updated_at = app_now() where workspace_id = $1`,
        [w],
      );
    } finally {
      writer.release();
      claimer.release();
    }
  });

  it('backoff from claim counts: 30 s doubling to one hour', async () => {
    const w = ws();
    await bulkRows(pool, { workspaceId: w, n: 1, dueOffsetMs: -1000 });
    for (let n = 1; n <= 10; n++) {
      const [claimed] = await claimDue(pool, { scope: { workspaceIds: [w] } });
      expect(claimed?.attempts).toBe(n);
      const { rows } = await pool.query<{ ms: number }>(
        `select extract(epoch from next_attempt_at - app_now()) * 1000 as ms
         from channel_typing_reaction where id = $1`,
        [claimed!.id],
      );
      expect(Math.abs(Number(rows[0]!.ms) - backoffAfterClaim(n))).toBeLessThan(2000);
      await pool.query('update channel_typing_reaction set next_attempt_at = app_now() where id = $1', [
        claimed!.id,
      ]);
    }
    expect(backoffAfterClaim(1)).toBe(30_000);
    expect(backoffAfterClaim(7)).toBe(1_920_000);
    expect(backoffAfterClaim(8)).toBe(3_600_000);
  });

  it('no remote retry is claimed after the seven-day deadline', async () => {
    const w = ws();
    await bulkRows(pool, {
      workspaceId: w,
      n: 3,
      dueOffsetMs: -1000,
      createdOffsetMs: -(7 * 86_400_000 + 1000),
    });
    expect(await claimDue(pool, { scope: { workspaceIds: [w] } })).toEqual([]);
  });
});

describe('remote-retry pass', () => {
  it('two concurrent passes withdraw each badge exactly once', async () => {
    const inst = await makeInstallation(pool, ws());
    const live = await liveRows(pool, inst, 60);
    const scope = { workspaceIds: [inst.workspaceId] };
    const [a, b] = await Promise.all([
      runRemoteRetry(pool, { keys: keys(), scope }),
      runRemoteRetry(pool, { keys: keys(), scope }),
    ]);
    expect(a.claimed + b.claimed).toBe(60);
    expect(a.cleaned + b.cleaned).toBe(60);
    expect((await callCounts())['reactions.delete']).toBe(60);
    expect(await counts(pool, inst.workspaceId)).toMatchObject({ live: 0, cleaned: 60 });
    for (const l of live.slice(0, 5)) expect(await typingOf(l.messageId, inst.appId)).toEqual([]);
    const r = await row(pool, live[0]!.id);
    expect(r.credential_snapshot).toBeNull();
  });

  it('a claimed row that does not fit the remaining pass budget is deferred (claim counted, no call)', async () => {
    const inst = await makeInstallation(pool, ws());
    const live = await liveRows(pool, inst, 6);
    const clock = new ManualClock();
    // Each DELETE "takes" three seconds of pass time: 10 → 7 → 4 → 1 s left, then no row fits 2 s.
    const slowFetch: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if ((init?.method ?? 'GET') === 'DELETE') clock.advance(3000);
      return res;
    };
    const r = await runRemoteRetry(pool, {
      keys: keys(),
      scope: { workspaceIds: [inst.workspaceId] },
      clock,
      fetch: slowFetch,
      concurrency: 1,
    });
    expect(r).toMatchObject({ claimed: 6, cleaned: 3, deferred: 3 });
    expect((await callCounts())['reactions.delete']).toBe(3);
    let stillOn = 0;
    for (const l of live) {
      const x = await row(pool, l.id);
      expect(x.attempts).toBe(1);
      if (x.cleaned_at === null) {
        stillOn++;
        expect(await typingOf(l.messageId, inst.appId)).toHaveLength(1);
      }
    }
    expect(stillOn).toBe(3);
  });

  it('a Lark that does not answer runs into the two-second per-operation budget', async () => {
    const inst = await makeInstallation(pool, ws());
    const live = await liveRows(pool, inst, 4);
    // Lark holds every DELETE unanswered (dropped by the next quietEmulator): only the budget
    // can end them. The pass clock stands still, so each operation's budget is its full 2 s,
    // and the timers the client arms are observed instead of timing the pass.
    await emu('faults', { route: 'reactions.delete', kind: 'hold', times: 4 });
    const timers = vi.spyOn(AbortSignal, 'timeout');
    const r = await runRemoteRetry(pool, {
      keys: keys(),
      scope: { workspaceIds: [inst.workspaceId] },
      clock: new ManualClock(),
    });
    const armed = timers.mock.calls.map(([ms]) => ms);
    timers.mockRestore();
    expect(r).toMatchObject({ claimed: 4, cleaned: 0, retryable: 4 });
    expect((await emu<{ held: unknown[] }>('faults')).held).toHaveLength(4);
    // The four DELETEs and the token calls before them (1 to 4: the rows race for the first
    // token), every one on the spec's two-second operation budget.
    expect(armed.length).toBeGreaterThanOrEqual(5);
    expect(new Set(armed)).toEqual(new Set([2000]));
    for (const l of live) {
      const x = await row(pool, l.id);
      expect(x.cleaned_at).toBeNull();
      expect(x.last_error).toMatch(/^retry:retryable/);
      expect(x.attempts).toBe(1);
    }
  });

  it("honours Lark's 429 reset: the row and that app's other rows wait for it", async () => {
    const inst = await makeInstallation(pool, ws());
    const live = await liveRows(pool, inst, 3);
    await emu('faults', { route: 'reactions.delete', kind: '429', resetSeconds: 300, times: 1 });
    const r = await runRemoteRetry(pool, {
      keys: keys(),
      scope: { workspaceIds: [inst.workspaceId] },
      concurrency: 1,
    });
    expect(r).toMatchObject({ claimed: 3, retryable: 1, deferred: 2, cleaned: 0 });
    for (const l of live) {
      const { rows } = await pool.query<{ s: number }>(
        'select extract(epoch from next_attempt_at - app_now()) as s from channel_typing_reaction where id = $1',
        [l.id],
      );
      expect(Number(rows[0]!.s)).toBeGreaterThan(290);
    }
  });
});
