import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import { afterEach, describe, expect, it } from 'vitest';
import { isolateGate, type Permit } from '../../workers/db/gate';
import { poolStats } from '../../workers/db/pool';
import { HEALTH_BUDGET_MS, HEALTH_GATE_WAIT_MS, healthProbes } from '../../workers/health/routes';
import worker from '../../workers/index';
import { captureLogLines } from '../helpers/logs';

describe('GET /healthz', () => {
  it('reports db ok through the Neon driver from inside workerd', async () => {
    const res = await exports.default.fetch('http://test/healthz');
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'ok', db: 'ok' });
  });

  it('names the version that answered (the deploy smoke test reads it)', async () => {
    const res = await exports.default.fetch('http://test/healthz');
    expect(env.CF_VERSION_METADATA.id).toMatch(/\S/);
    expect(res.headers.get('x-worker-version')).toBe(env.CF_VERSION_METADATA.id);
  });

  it('answers 503 with db down when the database is unreachable', async () => {
    const ctx = createExecutionContext();
    const broken = { ...env, DATABASE_URL: 'postgres://postgres:postgres@127.0.0.1:1/nowhere' };
    const logs = captureLogLines();
    const res = await worker.fetch(new Request('http://test/healthz'), broken, ctx);
    await waitOnExecutionContext(ctx);
    logs.restore();
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ db: 'down' });
    // The cause is logged once with its class, never swallowed.
    expect(logs.events('health_db_down')).toEqual([
      expect.objectContaining({
        level: 'warn',
        error: expect.objectContaining({ name: expect.any(String) }),
      }),
    ]);
  });

  it('opens a new pool for every request and ends it', async () => {
    const before = { ...poolStats };
    for (let i = 0; i < 3; i++) {
      // Ending is handed to waitUntil: waitOnExecutionContext awaits it.
      const ctx = createExecutionContext();
      const res = await worker.fetch(new Request('http://test/healthz'), env, ctx);
      await waitOnExecutionContext(ctx);
      expect(res.status).toBe(200);
    }
    expect(poolStats.opened - before.opened).toBe(3);
    expect(poolStats.ended - before.ended).toBe(3);
  });
});

/**
 * Issue 35 hole 11: a health check is an answer too. The budget is held by taking the isolate
 * gate's permits directly (the Worker's configuration keeps its 256 places), so each test holds
 * exactly the places it names for as long as it says (docs/operations.md "Health check").
 */
describe('GET /healthz under load (the isolate connection budget)', () => {
  const held: Permit[] = [];
  afterEach(() => {
    for (const p of held.splice(0)) p.release();
  });

  async function hold(priority: 'background' | 'answer', count: number) {
    for (let i = 0; i < count; i++) held.push(await isolateGate.acquire(priority, 0));
  }

  async function concurrentChecks(n: number) {
    const started = Date.now();
    return Promise.all(
      Array.from({ length: n }, async () => {
        const res = await exports.default.fetch('http://test/healthz');
        return {
          status: res.status,
          db: ((await res.json()) as { db: string }).db,
          ms: Date.now() - started,
        };
      }),
    );
  }

  it('health.background_exhausted: with every background place held, 16 concurrent checks answer 200 db ok (the places kept for answers)', async () => {
    await exports.default.fetch('http://test/healthz'); // the gate takes the Worker's configuration
    await hold('background', isolateGate.snapshot().backgroundCapacity);
    expect(isolateGate.snapshot()).toMatchObject({
      heldBackground: isolateGate.snapshot().backgroundCapacity,
    });
    const checks = await concurrentChecks(16);
    expect(checks.map((c) => [c.status, c.db])).toEqual(Array(16).fill([200, 'ok']));
    expect(Math.max(...checks.map((c) => c.ms))).toBeLessThan(HEALTH_BUDGET_MS);
  });

  it('health.busy_is_healthy: with every place held (answers queue too), 16 concurrent checks answer 200 db busy within their short gate wait, and leave no waiter behind', async () => {
    await exports.default.fetch('http://test/healthz');
    const { capacity, backgroundCapacity } = isolateGate.snapshot();
    await hold('background', backgroundCapacity);
    await hold('answer', capacity - backgroundCapacity);
    const checks = await concurrentChecks(16);
    expect(checks.map((c) => [c.status, c.db])).toEqual(Array(16).fill([200, 'busy']));
    // Refused by the gate after HEALTH_GATE_WAIT_MS, long before the 2 s the check allows.
    expect(Math.max(...checks.map((c) => c.ms))).toBeLessThan(HEALTH_BUDGET_MS);
    expect(Math.min(...checks.map((c) => c.ms))).toBeGreaterThanOrEqual(HEALTH_GATE_WAIT_MS - 10);
    expect(isolateGate.snapshot()).toMatchObject({ held: capacity, waitingAnswer: 0 });
  });
  it('health.single_flight: 16 checks arriving while a probe waits for its place share it: one probe, one connection, 16 answers of db ok', async () => {
    await exports.default.fetch('http://test/healthz');
    const { capacity, backgroundCapacity } = isolateGate.snapshot();
    await hold('background', backgroundCapacity);
    await hold('answer', capacity - backgroundCapacity);
    const before = { ...healthProbes, opened: poolStats.opened };
    const checks = concurrentChecks(16);
    // Every check has arrived (started a probe or joined one) while the first probe still waits
    // at the gate (it gives up only after HEALTH_GATE_WAIT_MS); then one place frees.
    const arrived = () => healthProbes.started + healthProbes.joined - before.started - before.joined;
    for (let i = 0; i < 200 && arrived() < 16; i++) await new Promise((r) => setTimeout(r, 1));
    expect(arrived()).toBe(16);
    held.pop()?.release();
    const answers = await checks;
    expect(answers.map((c) => [c.status, c.db])).toEqual(Array(16).fill([200, 'ok']));
    expect(healthProbes.started - before.started).toBe(1);
    expect(poolStats.opened - before.opened).toBe(1);
  });

  it('health.busy_names_open_pools: the busy answer is logged with the pools still open beside the places held', async () => {
    await exports.default.fetch('http://test/healthz');
    const { capacity, backgroundCapacity } = isolateGate.snapshot();
    await hold('background', backgroundCapacity);
    await hold('answer', capacity - backgroundCapacity);
    const logs = captureLogLines({ quiet: true });
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request('http://test/healthz'), { ...env, LOG_LEVEL: 'info' }, ctx);
    await waitOnExecutionContext(ctx);
    logs.restore();
    expect(((await res.json()) as { db: string }).db).toBe('busy');
    const [busy] = logs.events('health_db_busy');
    expect(busy).toMatchObject({ held: capacity, capacity, openPools: expect.any(Number) });
    // The places here are held without pools (this test's permits): fewer pools than places
    // is what tells a leak or a foreign holder from work in progress.
    expect(busy!.openPools as number).toBeLessThan(capacity);
  });
});

describe('configuration', () => {
  it('answers 500 bad_environment naming the variable, never its value', async () => {
    const ctx = createExecutionContext();
    const broken = { ...env, ADMIN_TOKEN: 'short-secret-value' };
    const res = await worker.fetch(new Request('http://test/healthz'), broken, ctx);
    expect(res.status).toBe(500);
    const body = await res.text();
    expect(JSON.parse(body).error.code).toBe('bad_environment');
    expect(body).toContain('ADMIN_TOKEN');
    expect(body).not.toContain('short-secret-value');
  });

  it('renders unknown routes in the one error shape', async () => {
    const res = await exports.default.fetch('http://test/no/such/route');
    expect(res.status).toBe(404);
    const body = (await res.json()) as { error: { code: string; requestId: string } };
    expect(body.error.code).toBe('not_found');
    expect(body.error.requestId).toBeTruthy();
  });
});
