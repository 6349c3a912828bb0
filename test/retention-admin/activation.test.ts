import { env } from 'cloudflare:workers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testPool } from '../helpers/db';
import { call, put, reactions, seedWorld, snapshot } from '../reaction-tickets/helpers';
import { admin, cleanupStatus, closeLegacyContract, currentGeneration, scoped } from './helpers';

const pool = testPool();

beforeAll(() => closeLegacyContract());
afterAll(() => pool.end());

async function activations() {
  const { rows } = await pool.query(
    `select action, operator, credential, generation::int, request_id is not null as has_request,
            at is not null as has_time
     from private.retention_activations order by id`,
  );
  return rows;
}

describe('scoped activation', () => {
  it('enable and rollback refuse the general admin token: 403, nothing changes', async () => {
    const generation = await currentGeneration();
    const enable = await admin('POST', '/admin/retention/enable', {
      generation,
      operator: 'ops@example.com',
    });
    expect(enable.status).toBe(403);
    expect(enable.body.error.code).toBe('forbidden');
    const rollback = await admin('POST', '/admin/retention/rollback', { operator: 'ops@example.com' });
    expect(rollback.status).toBe(403);
    expect(await cleanupStatus()).toMatchObject({ enabled: false, control: { generation, enabled: false } });
  });

  it('every enable, stop and rollback is recorded: who, with which credential, when, the generation', async () => {
    const before = (await activations()).length;
    const g0 = await currentGeneration();
    const enabled = await scoped('POST', '/admin/retention/enable', {
      generation: g0,
      operator: 'alice@example.com',
    });
    expect(enabled.status).toBe(200);
    const stopped = await scoped('POST', '/admin/retention/stop', { operator: 'bob@example.com' });
    expect(stopped.status).toBe(200);
    // Stopping only ever makes things safer: the general admin token may stop too, and says so.
    const stoppedByAdmin = await admin('POST', '/admin/retention/stop', { operator: 'oncall@example.com' });
    expect(stoppedByAdmin.status).toBe(200);
    expect((await activations()).slice(before)).toEqual([
      {
        action: 'enable',
        operator: 'alice@example.com',
        credential: 'retention_admin',
        generation: g0,
        has_request: true,
        has_time: true,
      },
      {
        action: 'stop',
        operator: 'bob@example.com',
        credential: 'retention_admin',
        generation: stopped.body.stopGeneration,
        has_request: true,
        has_time: true,
      },
      {
        action: 'stop',
        operator: 'oncall@example.com',
        credential: 'admin',
        generation: stoppedByAdmin.body.stopGeneration,
        has_request: true,
        has_time: true,
      },
    ]);
    expect((await cleanupStatus()).activations.slice(0, 3).map((a: { action: string }) => a.action)).toEqual([
      'stop',
      'stop',
      'enable',
    ]);
  });

  it('an action without an operator is 400 and records nothing', async () => {
    const before = (await activations()).length;
    const res = await scoped('POST', '/admin/retention/enable', { generation: await currentGeneration() });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('validation_failed');
    expect((await activations()).length).toBe(before);
  });
});

describe('the credential itself', () => {
  it('without RETENTION_ADMIN_TOKEN the cleanup cannot be activated (503); the admin token still stops it', async () => {
    const unset = { RETENTION_ADMIN_TOKEN: undefined };
    const generation = await currentGeneration();
    const enable = await call('POST', '/admin/retention/enable', {
      admin: true,
      body: { generation, operator: 'ops@example.com' },
      env: unset,
    });
    expect(enable.status).toBe(503);
    expect(enable.body.error.message).toMatch(/RETENTION_ADMIN_TOKEN is not configured/);
    const stop = await call('POST', '/admin/retention/stop', {
      admin: true,
      body: { operator: 'ops@example.com' },
      env: unset,
    });
    expect(stop.status).toBe(200);
    expect((await cleanupStatus()).enabled).toBe(false);
  });

  it('a RETENTION_ADMIN_TOKEN equal to ADMIN_TOKEN is a bad environment, named without its value', async () => {
    const res = await call('GET', '/admin/retention/status', {
      admin: true,
      env: { RETENTION_ADMIN_TOKEN: env.ADMIN_TOKEN },
    });
    expect(res.status).toBe(500);
    expect(res.body.error).toMatchObject({ code: 'bad_environment' });
    expect(res.body.error.message).toContain('RETENTION_ADMIN_TOKEN');
    expect(JSON.stringify(res.body)).not.toContain(env.ADMIN_TOKEN);
  });
});

describe('the activation record', () => {
  it('keeps 400 days: older records go with the next recorded action, at most 100 at a time', async () => {
    await pool.query(
      `insert into private.retention_activations (action, operator, credential, generation, request_id, at)
       select 'stop', 'old-' || g, 'admin', 0, 'r', app_now() - interval '401 days' - g * interval '1 minute'
       from generate_series(1, 150) g
       union all
       select 'stop', 'kept', 'admin', 0, 'r', app_now() - interval '399 days'`,
    );
    expect((await scoped('POST', '/admin/retention/stop', { operator: 'ops@example.com' })).status).toBe(200);
    const count = async () =>
      (
        await pool.query<{ old: number; kept: number }>(
          `select count(*) filter (where operator like 'old-%')::int as old,
                  count(*) filter (where operator = 'kept')::int as kept
           from private.retention_activations`,
        )
      ).rows[0];
    expect(await count()).toEqual({ old: 50, kept: 1 });
    expect((await scoped('POST', '/admin/retention/stop', { operator: 'ops@example.com' })).status).toBe(200);
    expect(await count()).toEqual({ old: 0, kept: 1 });
  });
});

describe('rollback', () => {
  it('stops the cleanup first, records it, and leaves the legacy write path closed', async () => {
    const enabled = await scoped('POST', '/admin/retention/enable', {
      generation: await currentGeneration(),
      operator: 'alice@example.com',
    });
    expect(enabled.status).toBe(200);
    const contractBefore = (await pool.query('select * from private.write_contract_state')).rows;

    const res = await scoped('POST', '/admin/retention/rollback', { operator: 'alice@example.com' });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      stop: { confirmed: true, enabled: false, control: { enabled: false } },
      legacyContract: { open: false, closedAndDrained: true },
    });
    expect(await cleanupStatus()).toMatchObject({
      enabled: false,
      cursor: null,
      control: { enabled: false },
    });
    expect((await activations()).at(-1)).toMatchObject({
      action: 'rollback',
      operator: 'alice@example.com',
      credential: 'retention_admin',
      generation: res.body.stop.stopGeneration,
    });

    // The legacy contract is as it was, and an unbounded (ticketless) write still fails closed.
    expect((await pool.query('select * from private.write_contract_state')).rows).toEqual(contractBefore);
    const w = await seedWorld();
    const [token, message, actor] = [w.tokens[0]!, w.messages[0]!, w.actors[0]!];
    const before = await snapshot(pool, message, actor);
    const legacy = await put(token, crypto.randomUUID(), undefined, {
      messageId: message,
      emoji: '👍',
      desired: 'present',
    });
    expect(legacy.status).toBe(426);
    expect(legacy.body.error.code).toBe('legacy_contract_closed');
    expect(await snapshot(pool, message, actor)).toEqual(before);
    expect((await reactions(token, message)).status).toBe(200);

    // Enabling again after a rollback needs a new, explicit enable with the new generation.
    const stale = await scoped('POST', '/admin/retention/enable', {
      generation: enabled.body.status.control.generation,
      operator: 'alice@example.com',
    });
    expect(stale.status).toBe(409);
  });
});
