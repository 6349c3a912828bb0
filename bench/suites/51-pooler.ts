import { randomBytes } from 'node:crypto';
import { startLarkEmulator } from '../../emulator/server';
import { startPgBouncer } from '../../scripts/lib/pgbouncer';
import { openPool } from '../../workers/db/pool';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round, timeSequential } from '../lib/stats';
import { buildDelivery, type Delivery, postEvent, setupApp, startWorker } from './50-channel';

/**
 * The direct endpoint vs the pooled one (PgBouncer in transaction mode, the local stand-in for
 * Neon's pooled endpoint) in the same run, on the same database:
 *
 * 1. one round trip of `select 1`: the bare driver, and `openPool`'s one-shot (its budget rides
 *    in the same round trip, workers/db/one-shot.ts), directly and through PgBouncer;
 * 2. 64 concurrent "requests" from Node, each opening its own pool as a Worker request does;
 * 3. the Lark webhook in `wrangler dev` at 64 concurrent events (as 50-channel), once per
 *    endpoint, with PgBouncer's pool (BENCH_POOL_SIZE, default 5) far below the concurrency.
 *
 * "peak backends" is the most server connections to the bench database seen at once
 * (pg_stat_activity, sampled every 20 ms from a direct connection, itself excluded).
 */
const POOL_SIZE = Number(process.env.BENCH_POOL_SIZE ?? 5);
const CONCURRENCY = 64;

export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const pgbouncer = await startPgBouncer(stack.databaseUrl, { poolSize: POOL_SIZE });
  const endpoints: [string, string][] = [
    ['direct', stack.databaseUrl],
    [`PgBouncer (transaction, pool ${POOL_SIZE})`, pgbouncer.rewrite(stack.databaseUrl)],
  ];
  const sampler = backendSampler(stack);
  try {
    const n = Number(process.env.BENCH_N ?? 1000);
    for (const [via, url] of endpoints) {
      const settings = { DATABASE_URL: url, NEON_WS_PROXY: stack.wsProxy, DB_STATEMENT_TIMEOUT_MS: 5000 };
      const pool = openPool(settings, 1);
      try {
        await pool.query('select 1'); // connect outside the measurement
        const one = await timeSequential(n, () => pool.query('select 1'));
        rows.push({
          suite: 'pooler',
          case: `openPool one-shot select 1 via ${via}`,
          n,
          'p50 ms': one.p50,
          'p99 ms': one.p99,
        });
      } finally {
        await pool.end();
      }
    }
    const bare = stack.neon(1);
    await bare.query('select 1');
    const b = await timeSequential(n, () => bare.query('select 1'));
    await bare.end(); // not counted in the peaks below
    rows.push({
      suite: 'pooler',
      case: 'bare driver select 1 (no budget) via direct',
      n,
      'p50 ms': b.p50,
      'p99 ms': b.p99,
    });

    for (const [via, url] of endpoints) {
      const settings = { DATABASE_URL: url, NEON_WS_PROXY: stack.wsProxy, DB_STATEMENT_TIMEOUT_MS: 5000 };
      const total = CONCURRENCY * 4;
      sampler.reset();
      const latencies: number[] = [];
      let failures = 0;
      let next = 0;
      let firstError = '';
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next++ < total) {
            const started = performance.now();
            // A Worker request: its own pool, two one-shots, then end.
            const pool = openPool(settings, 1);
            try {
              await pool.query('select pg_sleep(0.005)');
              await pool.query('select $1::int as n', [next]);
              latencies.push(performance.now() - started);
            } catch (err) {
              failures++;
              firstError ||= (err as Error).message;
            } finally {
              await pool.end();
            }
          }
        }),
      );
      rows.push({
        suite: 'pooler',
        case: `${CONCURRENCY} concurrent per-request pools (2 one-shots) via ${via}`,
        n: total,
        'p50 ms': round(percentile(latencies, 50)),
        'p99 ms': round(percentile(latencies, 99)),
        failures,
        'peak backends': sampler.peak(),
        ...(firstError ? { error: firstError.slice(0, 60) } : {}),
      });
    }

    rows.push(...(await webhook(stack, endpoints, sampler)));
  } finally {
    await sampler.stop();
    await pgbouncer.stop();
  }
  return rows;
}

async function webhook(
  stack: BenchStack,
  endpoints: [string, string][],
  sampler: ReturnType<typeof backendSampler>,
): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const lark = await startLarkEmulator({ rateLimits: false });
  // The ports given to this worktree's benches (8860-8879).
  const port = Number(process.env.BENCH_PORT ?? 8860);
  try {
    for (const [via, url] of endpoints) {
      const adminToken = `bench-admin-${randomBytes(12).toString('hex')}`;
      const worker = await startWorker(
        {
          DATABASE_URL: url,
          NEON_WS_PROXY: stack.wsProxy,
          ADMIN_TOKEN: adminToken,
          SECRET_KEYS: JSON.stringify({ '1': randomBytes(32).toString('base64') }),
          LARK_API_BASE: lark.url,
          LOG_LEVEL: 'error',
        },
        port,
      );
      try {
        const base = `http://127.0.0.1:${port}`;
        const { installationId, appId } = await setupApp(base, adminToken, lark.url);
        const n = Number(process.env.BENCH_CHANNEL_EVENTS ?? 128);
        const deliveries: Delivery[] = [];
        for (let from = 0; from < n; from += 100)
          deliveries.push(
            ...(await Promise.all(
              Array.from({ length: Math.min(100, n - from) }, (_, i) =>
                buildDelivery(lark.url, appId, `pool-${via.length}-${from + i}`),
              ),
            )),
          );
        await postEvent(base, installationId, await buildDelivery(lark.url, appId, `warm-${via.length}`));
        sampler.reset();
        const latencies: number[] = [];
        const statuses = new Map<number, number>();
        let next = 0;
        await Promise.all(
          Array.from({ length: CONCURRENCY }, async () => {
            while (next < n) {
              const d = deliveries[next++]!;
              const started = performance.now();
              const status = await postEvent(base, installationId, d);
              latencies.push(performance.now() - started);
              statuses.set(status, (statuses.get(status) ?? 0) + 1);
            }
          }),
        );
        const ok = statuses.get(200) ?? 0;
        rows.push({
          suite: 'pooler',
          case: `webhook answer, ${CONCURRENCY} concurrent, wrangler dev, via ${via}`,
          n,
          'p50 ms': round(percentile(latencies, 50)),
          'p99 ms': round(percentile(latencies, 99)),
          failures: n - ok,
          'peak backends': sampler.peak(),
          ...(n - ok ? { error: [...statuses].map(([s, c]) => `${c}×${s}`).join(' ') } : {}),
        });
      } finally {
        worker.stop();
      }
    }
  } finally {
    await lark.close();
  }
  return rows;
}

/** Server connections to the bench database, sampled from one direct connection. */
function backendSampler(stack: BenchStack) {
  const db = stack.pg(1);
  let peak = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const { rows } = await db.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity
          where datname = current_database() and pid <> pg_backend_pid()`,
      );
      peak = Math.max(peak, rows[0]!.n);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  return {
    reset: () => {
      peak = 0;
    },
    peak: () => peak,
    async stop() {
      running = false;
      await loop.catch(() => undefined);
    },
  };
}
