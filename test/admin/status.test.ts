import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { BACKLOG_QUERY } from '../../workers/admin/backlog';
import { enqueueMessage, ensureInstance } from '../../workers/effects/mailbox';
import { registerProcess } from '../../workers/effects/processes';
import { claimEffects } from '../../workers/effects/scheduler';
import worker from '../../workers/index';
import { ageHeartbeat, emit } from '../effects/helpers';
import { testPool, uid } from '../helpers/db';

const auth = { authorization: `Bearer ${env.ADMIN_TOKEN}` };

/** Every secret value the Worker holds, one by one: a single leaked key must fail the test. */
function secretValues(): [string, string][] {
  const keys = JSON.parse(env.SECRET_KEYS!) as Record<string, string>;
  const db = new URL(env.DATABASE_URL!);
  return [
    ['ADMIN_TOKEN', env.ADMIN_TOKEN!],
    ['ACTOR_JWT_SECRET', env.ACTOR_JWT_SECRET!],
    ...Object.entries(keys).map(([version, key]): [string, string] => [`SECRET_KEYS[${version}]`, key]),
    ['DATABASE_URL', env.DATABASE_URL!],
    // A server with trust auth has no password to leak.
    ...(db.password ? [['database password', decodeURIComponent(db.password)] as [string, string]] : []),
  ];
}

afterEach(() => {
  vi.restoreAllMocks();
});

const pool = testPool(2);
afterAll(() => pool.end());

type Backlog = Record<string, number>;
async function backlog(): Promise<Backlog> {
  const res = await exports.default.fetch('http://test/admin/status', { headers: auth });
  expect(res.status).toBe(200);
  return ((await res.json()) as { backlog: Backlog }).backlog;
}

describe('GET /admin/status', () => {
  it('status.counts_and_caps: seeded backlogs are counted exactly, and every count stops at the cap', async () => {
    const before = await backlog();
    const inst = await ensureInstance(pool, 'status-test', uid('s'));
    await emit(
      pool,
      inst,
      Array.from({ length: 6 }, () => ({ kind: 'status.noop' })),
    );
    const owner = await registerProcess(pool, 'status-owner');
    expect(await claimEffects(pool, owner, { limit: 2, instanceId: inst })).toHaveLength(2);
    for (const key of ['a', 'b', 'c']) await enqueueMessage(pool, inst, `status:${key}`, {});
    // Three recovery callbacks the actor never took (dead-lettered), two more live owners and
    // two gone silent.
    await pool.query(
      `insert into actor_mailbox (instance_id, message_key, state)
       select $1, 'effect:' || gen_random_uuid() || ':recovery', 'dead' from generate_series(1, 3)`,
      [inst],
    );
    for (const name of ['status-live-1', 'status-live-2']) await registerProcess(pool, name);
    // Three badges still pending and one withdrawn (not counted). The ledger has no foreign keys.
    await pool.query(
      `insert into channel_typing_reaction
         (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
          context_revision, expires_at, cleaned_at, retention_outcome)
       select $1 || g, 'ws', 'inst', 'cli_app', $1, $1 || ':m' || g, g, 1, app_now() + interval '7 days',
              case when g = 4 then app_now() end, case when g = 4 then 'cleaned' end
         from generate_series(1, 4) g`,
      [uid('status-ctr')],
    );
    for (const name of ['status-stale-1', 'status-stale-2'])
      await ageHeartbeat(
        pool,
        await registerProcess(pool, name),
        Number(env.EFFECT_STALE_AFTER_MS ?? 30_000) + 1000,
      );
    const after = await backlog();
    const delta = Object.fromEntries(
      Object.keys(after)
        .filter((k) => k !== 'db_now')
        .map((k) => [k, after[k]! - before[k]!]),
    );
    expect(delta).toMatchObject({
      effects_pending: 4,
      effects_processing: 2,
      mailbox_pending: 3,
      dead_recovery_callbacks: 3,
      live_processes: 3,
      stale_processes: 2,
      typing_pending: 3,
    });
    // The same query with a cap of 2: no count passes it, whatever the table holds.
    const { rows } = await pool.query<Backlog>(BACKLOG_QUERY, [
      2,
      Number(env.EFFECT_STALE_AFTER_MS ?? 30_000),
    ]);
    const capped = rows[0]!;
    for (const key of Object.keys(delta)) expect(capped[key], key).toBe(2);
    expect(Object.keys(delta)).toHaveLength(7);
  });

  it('requires the admin token', async () => {
    const res = await exports.default.fetch('http://test/admin/status');
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
  });

  it('reports the database, bounded backlogs and both singleton owners, without secrets', async () => {
    const res = await exports.default.fetch('http://test/admin/status', { headers: auth });
    expect(res.status).toBe(200);
    const text = await res.text();
    const body = JSON.parse(text);
    expect(body).toMatchObject({ status: 'ok', db: 'ok', countCap: 10_000 });
    for (const key of [
      'effects_pending',
      'effects_processing',
      'mailbox_pending',
      'live_processes',
      'stale_processes',
      'typing_pending',
    ]) {
      expect(typeof body.backlog[key]).toBe('number');
    }
    expect(body.legacyContract).toHaveProperty('closedAndDrained');
    expect(body.typingMaintenance).toHaveProperty('enabled');
    expect(body.retentionCleanup).not.toBeNull();
    const secrets = secretValues();
    expect(secrets.length).toBeGreaterThanOrEqual(5);
    for (const [name, value] of secrets) {
      expect(value.length, name).toBeGreaterThan(0);
      expect(text.includes(value), `${name} appears in /admin/status`).toBe(false);
    }
  });

  it('answers 503 and logs the failed database read once when the database is unreachable', async () => {
    const errors = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const broken = { ...env, DATABASE_URL: 'postgres://postgres:postgres@127.0.0.1:1/nowhere' };
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request('http://test/admin/status', { headers: auth }), broken, ctx);
    await waitOnExecutionContext(ctx);
    expect(res.status).toBe(503);
    const body = (await res.json()) as { db: string; typingMaintenance: unknown };
    expect(body.db).toBe('down');
    // The owners live in their Durable Objects, which still answer.
    expect(body.typingMaintenance).not.toBeNull();
    const lines = errors.mock.calls
      .map(([line]) => String(line))
      .filter((line) => line.includes('"admin_status_read_failed"'));
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ part: 'database', error: { name: expect.any(String) } });
  });
});
