import { Hono } from 'hono';
import type { AppEnv } from '../context';
import { withTimeout } from '../lib/timeout';
import { log } from '../log';

const HEALTH_BUDGET_MS = 2000;

/** GET /healthz: the database as the Worker sees it, through the Neon driver. */
export const health = new Hono<AppEnv>().get('/', async (c) => {
  const started = Date.now();
  try {
    const pool = c.var.db();
    await withTimeout(pool.query('select 1'), HEALTH_BUDGET_MS, () => new Error('db timeout'));
    return c.json({ status: 'ok', db: 'ok', latencyMs: Date.now() - started });
  } catch (err) {
    log.warn('health_db_down', { error: err });
    return c.json({ status: 'degraded', db: 'down', latencyMs: Date.now() - started }, 503);
  }
});
