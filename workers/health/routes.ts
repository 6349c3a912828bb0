import { Hono } from 'hono';
import type { AppEnv } from '../context';
import { ConnectionBudgetSpent, isolateGate } from '../db/gate';
import { openPool, poolStats } from '../db/pool';
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

/**
 * GET /healthz: the database as the Worker sees it, through the Neon driver, on a connection of
 * its own taken as an `answer` (it passes waiting background work, and background work can
 * never hold the places kept for answers).
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
  const pool = openPool(c.var.config, { max: 1, priority: 'answer', gateWaitMs: HEALTH_GATE_WAIT_MS });
  try {
    await withTimeout(pool.query('select 1'), HEALTH_BUDGET_MS, () => new Error('db timeout'));
    return c.json({ status: 'ok', db: 'ok', latencyMs: Date.now() - started });
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
      return c.json({ status: 'ok', db: 'busy', latencyMs: Date.now() - started });
    }
    log.warn('health_db_down', { error: err });
    return c.json({ status: 'degraded', db: 'down', latencyMs: Date.now() - started }, 503);
  } finally {
    // After the answer: ending waits for the socket, which the answer need not.
    const ending = pool.end();
    try {
      c.executionCtx.waitUntil(ending);
    } catch {
      // By design: no execution context (a direct app.request in a test), so end it now.
      await ending;
    }
  }
});
