import { Hono } from 'hono';
import type { AppEnv } from '../context';
import { ConnectionBudgetSpent, isolateGate } from '../db/gate';
import { openPool, poolStats } from '../db/pool';
import type { Config } from '../env';
import { withTimeout } from '../lib/timeout';
import { log } from '../log';

/** Connecting and `select 1`, together: past it the database is reported down. */
export const HEALTH_BUDGET_MS = 2000;

/**
 * How long a health check waits for a place in the isolate's connection budget (db/gate.ts).
 * Short: a budget every place of which stays in use this long means the isolate is busy
 * serving (its connections are open and working), which is an answer in itself; waiting the
 * connect budget, as requests do, made a health check at 64 concurrent fail for a Worker that
 * was answering everything else (issue 35 hole 11).
 */
export const HEALTH_GATE_WAIT_MS = 250;

type DbHealth = 'ok' | 'busy' | 'down';

/**
 * The probe in flight per database, shared by every health check of the isolate that arrives
 * while it runs (single flight). A monitor or load balancer polling from many places, or a
 * burst of checks under load, costs one connection and one `select 1` at a time instead of
 * one each: 64 concurrent checks used to open 64 backends on a busy isolate, the checks
 * themselves then failing for want of CPU (issue 35 hole 11). An answer is never older than
 * the probe it joined, which started at most HEALTH_BUDGET_MS before it; a check arriving
 * after a probe settled starts a new one (nothing is cached).
 *
 * Keyed by the database the check's configuration names (a test may pass another env).
 */
const inflight = new Map<string, Promise<DbHealth>>();

/** Probes started and checks that joined one in flight (the single-flight test reads them). */
export const healthProbes = { started: 0, joined: 0 };

function probeDatabase(config: Config, waitUntil: (p: Promise<unknown>) => void): Promise<DbHealth> {
  const key = `${config.DATABASE_URL}\n${config.NEON_WS_PROXY ?? ''}`;
  const running = inflight.get(key);
  if (running) {
    healthProbes.joined += 1;
    return running;
  }
  healthProbes.started += 1;
  // Started in a microtask so that it is in the map before any of it runs, however it ends.
  const probe: Promise<DbHealth> = Promise.resolve()
    .then(() => selectOne(config, waitUntil))
    .finally(() => {
      if (inflight.get(key) === probe) inflight.delete(key);
    });
  inflight.set(key, probe);
  return probe;
}

async function selectOne(config: Config, waitUntil: (p: Promise<unknown>) => void): Promise<DbHealth> {
  const pool = openPool(config, { max: 1, priority: 'answer', gateWaitMs: HEALTH_GATE_WAIT_MS });
  try {
    await withTimeout(pool.query('select 1'), HEALTH_BUDGET_MS, () => new Error('db timeout'));
    return 'ok';
  } catch (err) {
    if (err instanceof ConnectionBudgetSpent) {
      // Handled by design (above): the isolate is serving its budget's worth of connections.
      // Logged at info (a saturated isolate's health checks would otherwise be a warning each);
      // the refusals are counted by db_gate_wait_ms (refused, answer). `openPools` beside
      // `held` tells work in progress (pools still open hold the places) from places held
      // after their pools ended (taken back after PERMIT_MAX_HOLD_MS).
      const { held, capacity, waitingAnswer } = isolateGate.snapshot();
      const openPools = poolStats.opened - poolStats.ended;
      log.info('health_db_busy', { held, capacity, waitingAnswer, openPools });
      return 'busy';
    }
    // Logged once per probe, however many checks joined it.
    log.warn('health_db_down', { error: err });
    return 'down';
  } finally {
    // After the answer: ending waits for the socket, which the answer need not.
    waitUntil(pool.end());
  }
}

/**
 * GET /healthz: the database as the Worker sees it, through the Neon driver, on a connection of
 * its own taken as an `answer` (it passes waiting background work, and background work can
 * never hold the places kept for answers), shared by the checks that arrive while it runs
 * (`probeDatabase`).
 *
 * - 200 `db: "ok"`: `select 1` answered within HEALTH_BUDGET_MS.
 * - 200 `db: "busy"`: every place of the isolate's budget stayed in use for HEALTH_GATE_WAIT_MS.
 *   Those connections are the isolate's work in progress: busy is healthy. A load balancer or
 *   uptime monitor that took a busy Worker out would move its load onto the others.
 * - 503 `db: "down"`: the connection or the statement failed, or did not finish in time.
 *
 * Every answer names the Worker version that gave it (`x-worker-version`, the version metadata
 * binding): `npm run deploy` smoke-tests a new version through the version-override header,
 * which the platform ignores silently until the version is in the deployment, and only this
 * header tells the version that answered from the one serving traffic (scripts/lib/deploy-smoke.ts).
 */
export const health = new Hono<AppEnv>().get('/', async (c) => {
  const started = Date.now();
  // Optional: a direct app.request in a test may pass an env without the binding.
  const version = c.env.CF_VERSION_METADATA?.id;
  if (version) c.header('x-worker-version', version);
  const pending: Promise<unknown>[] = [];
  const waitUntil = (p: Promise<unknown>) => {
    try {
      c.executionCtx.waitUntil(p);
    } catch {
      // By design: no execution context (a direct app.request in a test), so await it below.
      pending.push(p);
    }
  };
  // Each check bounds its own wait: a joined probe whose first check went away still answers
  // within the budget (a margin past it, so the probe's own timeout is the one seen).
  const db = await withTimeout(
    probeDatabase(c.var.config, waitUntil),
    HEALTH_BUDGET_MS + 250,
    () => new Error('db timeout'),
  ).catch((err: unknown): DbHealth => {
    log.warn('health_db_down', { error: err });
    return 'down';
  });
  await Promise.all(pending);
  const latencyMs = Date.now() - started;
  if (db === 'down') return c.json({ status: 'degraded', db, latencyMs }, 503);
  return c.json({ status: 'ok', db, latencyMs });
});
