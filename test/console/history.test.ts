import { describe, expect, it } from 'vitest';
import { Deadline } from '../../workers/clock';
import { CONSOLE_RETENTION } from '../../workers/housekeeping/console-history';
import { runHousekeeping } from '../../workers/housekeeping/run';
import { ledgerClient } from '../../workers/typing-ledger/client';
import { RUN_BUDGET_MS } from '../../workers/typing-ledger/maintenance-history';
import { runRemoteRetry } from '../../workers/typing-ledger/passes/retry';
import { scheduleRetry } from '../../workers/typing-ledger/store';
import { advanceDbClock, uid } from '../helpers/db';
import { emu } from '../lark/helpers';
import { keys, makeInstallation, newMessage, register } from '../typing-ledger/helpers';
import { bulkRows, liveRows, runMaintenanceAlarm } from '../typing-maintenance/helpers';
import { fixtures } from './helpers';

/** The console's history tables: who writes them, and the retention rule that empties them. */
const f = fixtures();
const { track } = f;
const DAY = 86_400_000;

const incidents = async (workspaceId: string, kind: 'quota_skip' | 'withdraw_failed') =>
  Number(
    (
      await f.pool.query(
        'select count(*)::int as n from typing_incidents where workspace_id = $1 and kind = $2',
        [workspaceId, kind],
      )
    ).rows[0].n,
  );

const count = async (table: string) =>
  Number((await f.pool.query(`select count(*)::int as n from ${table}`)).rows[0].n);

describe('console history is written where it happens', () => {
  it('a maintenance run records its counters and its budget', async () => {
    const before = await count('typing_maintenance_runs');
    const report = await runMaintenanceAlarm();
    const { rows } = await f.pool.query('select * from typing_maintenance_runs order by id desc limit 1');
    expect(await count('typing_maintenance_runs')).toBe(before + 1);
    expect(rows[0]).toMatchObject({ budget_ms: RUN_BUDGET_MS, stopped: report.stopped, failed_steps: 0 });
    expect(rows[0].duration_ms).toBe(Math.round(report.durationMs));
  });

  it('a registration refused by the full quota appends one skip for its workspace; a registered one none', async () => {
    const inst = await makeInstallation(f.pool);
    track(inst.workspaceId);
    const skips = () => incidents(inst.workspaceId, 'quota_skip');
    const ok = await register(f.pool, inst, {
      sessionId: uid('s'),
      messageId: await newMessage(),
      position: 1,
    });
    expect(ok.kind).toBe('registered');
    expect(await skips()).toBe(0);
    await f.pool.query('delete from channel_typing_reaction where workspace_id = $1', [inst.workspaceId]);
    await bulkRows(f.pool, { workspaceId: inst.workspaceId, n: 1000, slots: true });
    const full = await register(f.pool, inst, {
      sessionId: uid('s'),
      messageId: await newMessage(),
      position: 2,
    });
    expect(full).toEqual({ kind: 'skipped', reason: 'quota_full' });
    expect(await skips()).toBe(1);
  });

  it('a failed withdrawal, immediate or by the retry pass, is one incident per attempt; a clean one none', async () => {
    const inst = await makeInstallation(f.pool);
    track(inst.workspaceId);
    const failed = () => incidents(inst.workspaceId, 'withdraw_failed');
    const [a] = await liveRows(f.pool, inst, 2);
    await scheduleRetry(f.pool, a!.id, { delayMs: 0, error: 'withdraw:retryable:0' });
    expect(await failed()).toBe(1);
    await f.pool.query(
      'update channel_typing_reaction set next_attempt_at = app_now() where workspace_id = $1',
      [inst.workspaceId],
    );
    await emu('faults', { route: 'reactions.delete', kind: '5xx', status: 503, times: 1 });
    const report = await runRemoteRetry(f.pool, {
      keys: keys(),
      scope: { workspaceIds: [inst.workspaceId] },
    });
    expect(report).toMatchObject({ claimed: 2, cleaned: 1, retryable: 1 });
    expect(await failed()).toBe(2);
  });

  it('a failed Open API call is the app’s last error; an already-gone answer is not an error', async () => {
    const inst = await makeInstallation(f.pool);
    track(inst.workspaceId);
    const lark = ledgerClient(f.pool, {
      baseUrl: inst.apiBase,
      appId: inst.appId,
      appSecret: inst.appSecret,
    });
    const call = () => ({ deadline: new Deadline(3000) });
    const messageId = await newMessage();
    await expect(lark.deleteReaction(messageId, 'no-such-reaction', call())).rejects.toMatchObject({
      kind: 'already_gone',
    });
    const last = () =>
      f.pool.query('select route, code, http_status from lark_api_errors where app_id = $1', [inst.appId]);
    expect((await last()).rows).toEqual([]);
    await emu('faults', { route: 'reactions.delete', kind: '5xx', status: 502 });
    await expect(lark.deleteReaction(messageId, 'any', call())).rejects.toMatchObject({ kind: 'retryable' });
    expect((await last()).rows).toEqual([{ route: 'reactions.delete', code: 0, http_status: 502 }]);
  });
});

describe('console history retention (housekeeping `console` step)', () => {
  it('deletes each table’s rows past its period, oldest first and bounded per run, and keeps younger ones', async () => {
    const settings = {
      ticketGraceMs: DAY,
      channelHistoryMs: DAY,
      conversationIdleMs: DAY,
      batchRows: 2,
      stepBudgetMs: 3000,
    };
    const prune = async () => (await runHousekeeping(f.pool, settings, ['console'])).console;
    // This file's own database: the rows above are cleared so each count is exact.
    for (const table of Object.keys(CONSOLE_RETENTION)) await f.pool.query(`delete from ${table}`);
    const insertAll = async () => {
      await f.pool.query(
        `insert into console_audit (operator, action, outcome, request_id) values ('ops', 'typing-stop', 'stopped', 'r1')`,
      );
      await f.pool.query(
        `insert into typing_maintenance_runs (duration_ms, budget_ms, stopped, expired, pruned, claimed, cleaned, deferred, failed_steps)
         values (10, 15000, false, 0, 0, 0, 0, 0, 0)`,
      );
      await f.pool.query(
        `insert into typing_incidents (workspace_id, kind) select 'ws_hist', 'quota_skip' from generate_series(1, 3)`,
      );
      await f.pool.query(
        `insert into lark_api_errors (api_base, app_id, route, code, http_status) values ('https://h', $1, 'reply', 1, 400)`,
        [uid('cli')],
      );
    };
    await insertAll();
    expect(CONSOLE_RETENTION).toEqual({
      console_audit: '90 days',
      typing_maintenance_runs: '3 days',
      typing_incidents: '2 days',
      lark_api_errors: '30 days',
    });
    const tables = Object.keys(CONSOLE_RETENTION);
    const counts = async () =>
      Object.fromEntries(await Promise.all(tables.map(async (t) => [t, await count(t)])));
    const start = await counts();
    await advanceDbClock(f.pool, 2 * DAY - 60_000);
    expect(await prune()).toBe(0);
    await advanceDbClock(f.pool, 2 * 60_000);
    // Three skips are due; a run deletes at most batchRows (2) of them.
    expect(await prune()).toBe(2);
    expect(await prune()).toBe(1);
    expect(await counts()).toEqual({ ...start, typing_incidents: start.typing_incidents - 3 });
    await advanceDbClock(f.pool, DAY);
    expect(await prune()).toBe(1);
    expect(await count('typing_maintenance_runs')).toBe(start.typing_maintenance_runs - 1);
    await advanceDbClock(f.pool, 27 * DAY);
    expect(await prune()).toBe(1);
    expect(await count('lark_api_errors')).toBe(start.lark_api_errors - 1);
    await advanceDbClock(f.pool, 60 * DAY);
    expect(await prune()).toBe(1);
    expect(await counts()).toEqual(Object.fromEntries(tables.map((t) => [t, 0])));
  });
});
