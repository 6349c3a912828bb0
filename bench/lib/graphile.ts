import { Logger, run as runGraphile, runMigrations } from 'graphile-worker';
import type pg from 'pg';

/** The yardstick's no-op jobs, staged in one statement, then analyzed (as our preload is). */
export async function stageGraphileJobs(q: pg.Pool, n: number): Promise<void> {
  await q.query(
    `select graphile_worker.add_jobs(array_agg(json_populate_record(null::graphile_worker.job_spec,
            json_build_object('identifier', 'noop', 'payload', '{}'::json))))
       from generate_series(1, $1)`,
    [n],
  );
  await q.query('analyze');
}

// Per-job INFO lines would make graphile-worker pay for console I/O that our loop does not.
const quiet = new Logger(() => () => undefined);

/**
 * Drains `n` staged no-op jobs with graphile-worker on `pool`, which the caller owns and ends:
 * a pool graphile-worker opened on its own outlived runner.stop(), and a database drop's forced
 * disconnect then crashed the bench with an unhandled 'error' (57P01).
 * `localQueue` is the batch size of graphile-worker's local queue, or null for none.
 */
export async function drainGraphile(
  pool: pg.Pool,
  opts: { n: number; concurrency: number; localQueue: number | null },
): Promise<{ done: number; ms: number }> {
  let done = 0;
  let finish: () => void = () => undefined;
  const finished = new Promise<void>((r) => {
    finish = r;
  });
  const started = performance.now();
  const runner = await runGraphile({
    pgPool: pool,
    concurrency: opts.concurrency,
    noHandleSignals: true,
    pollInterval: 50,
    logger: quiet,
    taskList: {
      noop: async () => {
        done++;
        if (done >= opts.n) finish();
      },
    },
    ...(opts.localQueue
      ? {
          preset: {
            worker: {
              localQueue: { size: opts.localQueue },
              completeJobBatchDelay: 0,
              maxPoolSize: opts.concurrency + 2,
            },
          },
        }
      : {}),
  });
  await finished;
  const ms = performance.now() - started;
  await runner.stop();
  return { done, ms };
}

/** graphile-worker's schema, installed quietly. */
export async function installGraphile(connectionString: string): Promise<void> {
  await runMigrations({ connectionString, logger: quiet });
}
