import { runDurableObjectAlarm } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MaintenanceStatus } from '../../durable-objects/typing-maintenance';
import { runMaintenancePasses } from '../../workers/typing-ledger/maintenance';
import { setDbClockOffset, testPool, uid } from '../helpers/db';
import { emu } from '../lark/helpers';
import {
  bulkRows,
  captureLogs,
  keys,
  liveRows,
  maintenanceStub,
  makeInstallation,
  nextMaintenanceWindow,
  quietEmulator,
  trackWorkspaces,
} from './helpers';

const lines = captureLogs();
let pool: Pool;
const { ws, track, dropAll } = trackWorkspaces();
const stub = maintenanceStub;
const admin = (path: string, method = 'GET', token = env.ADMIN_TOKEN!) =>
  exports.default.fetch(`http://test/admin/typing-reactions/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}` },
  });
const newWindow = nextMaintenanceWindow;

beforeAll(async () => {
  pool = testPool(8);
  await quietEmulator();
});
afterAll(async () => {
  await setDbClockOffset(pool, 0);
  await dropAll(pool);
  await admin('enable', 'POST');
  await quietEmulator(true);
  await pool.end();
});

describe('admin API and the maintenance object', () => {
  it('status requires the admin token', async () => {
    expect((await admin('status', 'GET', 'wrong-token-wrong-token-wrong')).status).toBe(401);
    expect((await admin('stop', 'POST', 'wrong-token-wrong-token-wrong')).status).toBe(401);
  });

  it('an alarm runs expiry, pruning, receipts and retries; status shows per-workspace counts and the last pass, no snapshots', async () => {
    const w = ws();
    await bulkRows(pool, { workspaceId: w, n: 3, createdOffsetMs: -60_000 });
    await bulkRows(pool, { workspaceId: w, n: 2, terminal: 'abandoned' });
    const receipt = uid('ev');
    await pool.query(
      `insert into lark_event_receipts (installation_id, event_id, event_type, received_at)
       values ('inst_tm', $1, 'im.message.receive_v1', app_now() - interval '2 days')`,
      [receipt],
    );
    await newWindow();
    expect(await runDurableObjectAlarm(stub())).toBe(true);
    const { rows } = await pool.query('select 1 from lark_event_receipts where event_id = $1', [receipt]);
    expect(rows).toEqual([]);

    const res = await admin('status');
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain('placeholder-sealed');
    expect(text).not.toContain('credential_snapshot');
    const body = JSON.parse(text);
    const mine = body.workspaces.find((x: { workspace_id: string }) => x.workspace_id === w);
    expect(mine).toMatchObject({ pending: 3, overdue_redaction: 0, abandoned: 2 });
    expect(mine.oldest_pending).toBeTruthy();
    expect(body.maintenance).toMatchObject({ enabled: true, running: false });
    const last = body.maintenance.lastReport;
    for (const k of ['expire', 'prune', 'receipts', 'retry']) expect(last[k]).toBeTruthy();
    expect(last.retry).toHaveProperty('claimed');
    expect(last.retry).toHaveProperty('deferred');
    expect(last.expire).toHaveProperty('durationMs');
  });

  it('stop moves the generation and disables: no pass until enable', async () => {
    const before = (await (await admin('status')).json()) as { maintenance: MaintenanceStatus };
    const stopped = (await (await admin('stop', 'POST')).json()) as MaintenanceStatus;
    expect(stopped).toMatchObject({ enabled: false, drained: true });
    expect(stopped.stopGeneration).toBe(before.maintenance.stopGeneration + 1);
    const lastAt = stopped.lastReport?.at ?? null;
    await newWindow();
    await runDurableObjectAlarm(stub());
    expect((await stub().status()).lastReport?.at ?? null).toBe(lastAt);

    expect(await (await admin('disable', 'POST')).json()).toMatchObject({ enabled: false });
    const enabled = await (await admin('enable', 'POST')).json();
    expect(enabled).toMatchObject({ enabled: true, stopGeneration: stopped.stopGeneration });
    await newWindow();
    await runDurableObjectAlarm(stub());
    const after = await stub().status();
    expect(after.lastReport?.at).not.toBe(lastAt);
    expect(after.lastReport?.stopGeneration).toBe(stopped.stopGeneration);
  });

  it('a run admitted under an old generation stops at its next step', async () => {
    let admitted = true;
    const w = ws();
    await bulkRows(pool, { workspaceId: w, n: 2, createdOffsetMs: -8 * 86_400_000 });
    const report = await runMaintenancePasses(pool, {
      keys: keys(),
      scope: { workspaceIds: [w] },
      admit: () => {
        const ok = admitted;
        admitted = false; // the stop lands right after the first step is admitted
        return ok;
      },
    });
    expect(report.stopped).toBe(true);
    expect(report.expire).toMatchObject({ expired: 2 });
    expect(report.prune).toBeNull();
    expect(report.retry).toBeNull();
  });
});

describe('signals', () => {
  it('no log line contains a credential or a snapshot, through failures, 429s and expiry', async () => {
    const inst = await makeInstallation(pool, track(uid('ws')));
    await liveRows(pool, inst, 4);
    await emu('faults', { route: 'reactions.delete', kind: '429', resetSeconds: 60, times: 1 });
    await emu('faults', { route: 'reactions.delete', kind: '5xx', times: 1 });
    const r1 = await runMaintenancePasses(pool, {
      keys: keys(),
      scope: { workspaceIds: [inst.workspaceId] },
      retry: { concurrency: 1 },
    });
    expect(r1.retry).toMatchObject({ claimed: 4, retryable: 1 });
    await setDbClockOffset(pool, 8 * 86_400_000);
    await runMaintenancePasses(pool, { keys: keys(), scope: { workspaceIds: [inst.workspaceId] } });
    await setDbClockOffset(pool, 0);
    const { rows } = await pool.query<{ s: string }>(
      `select credential_snapshot as s from channel_typing_reaction where credential_snapshot is not null limit 50`,
    );
    const secrets = [inst.appSecret, ...rows.map((r) => r.s), 'placeholder-sealed'];
    expect(lines.some((l) => l.includes('typing_withdraw_failed'))).toBe(true);
    expect(lines.some((l) => l.includes('typing_indicators_expired') && l.includes(inst.workspaceId))).toBe(
      true,
    );
    for (const line of lines) for (const s of secrets) expect(line).not.toContain(s);
  });
});
