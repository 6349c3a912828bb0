import { cloudflareTest } from '@cloudflare/vitest-plugin';
import { defineConfig } from 'vitest/config';
import { retentionAuxiliaryWorker } from './test/setup/retention-worker';
import { appDatabaseUrl, createFileDatabase, startFileEmulator } from './test/setup/stack';

export const TEST_ADMIN_TOKEN = 'test-admin-token-0123456789abcdef';
/** The retention cleanup's own credential (enable, stop, rollback), distinct from the admin token. */
export const TEST_RETENTION_ADMIN_TOKEN = 'test-retention-admin-token-fedcba9876543210';
export const TEST_SECRET_KEYS = JSON.stringify({
  '1': 'MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=',
  '2': 'ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=',
});

/** HS256 secret for actor JWTs in tests (mobile reaction API, test/reaction-tickets). */
export const TEST_ACTOR_JWT_SECRET = 'test-actor-jwt-secret-0123456789abcdef0123';

/**
 * The main Worker under test (wrangler.toml) with the Lark emulator and the retention Worker
 * beside it, on a database of the file's own (test/setup/file-database.ts).
 */
function workersProject(name: string, include: string[], exclude: string[], isolate: boolean) {
  return {
    plugins: [
      // Called once per workerd runtime (per file where `isolate`, else per vitest worker):
      // a database copied from the migrated template and a Lark emulator, both replaced
      // under the same names when each file ends (test/setup/file-database.ts).
      cloudflareTest(async ({ inject }) => {
        const direct = await createFileDatabase(
          inject('adminUrl'),
          inject('templateDatabase'),
          inject('databasePrefix'),
        );
        const database = {
          // Through PgBouncer on a PGBOUNCER=1 run (test/setup/stack.ts).
          DATABASE_URL: appDatabaseUrl(direct, inject('pgbouncerPort')),
          NEON_WS_PROXY: inject('wsProxy'),
        };
        return {
          main: './workers/index.ts',
          wrangler: { configPath: './wrangler.toml' },
          miniflare: {
            bindings: {
              ...database,
              // The tests' own connections (test/helpers/db.ts): always direct.
              TEST_DIRECT_DATABASE_URL: direct,
              LARK_API_BASE: await startFileEmulator(),
              ADMIN_TOKEN: TEST_ADMIN_TOKEN,
              RETENTION_ADMIN_TOKEN: TEST_RETENTION_ADMIN_TOKEN,
              SECRET_KEYS: TEST_SECRET_KEYS,
              LOG_LEVEL: 'warn',
              ACTOR_JWT_SECRET: TEST_ACTOR_JWT_SECRET,
              // Channel engine: long enough that tests drive the debounce (DB clock + DO alarm).
              CHANNEL_DEBOUNCE_MS: '20000',
              // Durable Object alarms never fire on their own: a test runs the passes it asks
              // for (runDurableObjectAlarm), and nothing runs behind its back.
              DO_ALARMS: 'manual',
            },
            // A rate limiter small enough to exceed in a test (the real ones, from
            // wrangler.toml, allow hundreds a minute); a test swaps it in for one request.
            ratelimits: { TEST_RATE_LIMIT_3: { namespace_id: '9003', simple: { limit: 3, period: 60 } } },
            // The retention cleanup Worker (its deploy bundle), on the same database: the
            // RETENTION service binding of wrangler.toml reaches it as in production.
            workers: [await retentionAuxiliaryWorker({ ...database, LOG_LEVEL: 'warn' })],
          },
        };
      }),
    ],
    test: {
      name,
      deps: {
        optimizer: {
          ssr: {
            enabled: true,
            include: [
              'hono',
              'hono/cookie',
              'hono/html',
              'hono/http-exception',
              'zod',
              '@hono/zod-openapi',
              'jose',
              '@neondatabase/serverless',
            ],
          },
        },
      },
      // Projects do not inherit the root's test options.
      testTimeout: 30_000,
      hookTimeout: 60_000,
      // BENCH_WORKERD=1: the benches that need workerd (bench/workerd), never with the tests.
      include,
      exclude,
      setupFiles: ['./test/setup/file-database.ts', './test/setup/tx-retries.ts'],
      isolate,
      fileParallelism: true,
      maxWorkers: WORKERS,
    },
  };
}

/**
 * Files that need a runtime of their own: the retention Worker's RetentionCleanup object (an
 * auxiliary Worker's Durable Object, which a test cannot reach to clear) keeps its generation
 * and stop from one file to the next; the connection gate's files and the health check count the
 * isolate's places exactly (module state: a pool an earlier file's aborted object never ended
 * still holds one until PERMIT_MAX_HOLD_MS).
 */
const ISOLATED = [
  'test/retention-admin/**/*.test.ts',
  'test/foundation/db.gate*.test.ts',
  'test/foundation/healthz.test.ts',
  // Under a shared runtime its first case failed in 2 of 9 full runs (the check staged in the
  // post-effect drain left unanswered by that wake, `outcome: null`), never alone or with the
  // other effects files; the cause is not found yet (docs/toolchain.md).
  'test/effects/actor-host.latency.test.ts',
];

/**
 * Files at once, in every project (vitest runs projects of one group with one count). Three on
 * this 2-core machine: a file spends much of its time waiting on Postgres, a lock it is made
 * to wait on, or the emulator, and a third file fills those waits (docs/toolchain.md).
 */
const WORKERS = 3;

export default defineConfig({
  test: {
    globalSetup: ['./test/setup/global-setup.ts'],
    // .ci/run reads the JSON report; its PgBouncer run names another file (VITEST_JSON).
    reporters: ['default', ['json', { outputFile: process.env.VITEST_JSON ?? 'test-results/vitest.json' }]],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      // Two workers, each one workerd runtime that runs its files one after another: the
      // modules are evaluated once per worker, not once per file (the import was most of a
      // file's time). Each file still gets a database and an emulator of its own.
      workersProject(
        'workers',
        process.env.BENCH_WORKERD ? ['bench/workerd/**/*.test.ts'] : ['test/**/*.test.ts'],
        // *.unit.test.ts: pure logic with no binding, database or runtime API of workerd's
        // own; they run in the node project, where a file costs no runtime start.
        ['test/node/**', 'test/retention/**', 'test/**/*.unit.test.ts', ...ISOLATED],
        // The PgBouncer run keeps a runtime per file: a database dropped under PgBouncer's
        // pooled server connections would be a failure of its own.
        Boolean(process.env.PGBOUNCER),
      ),
      // Files whose state lives where a file's end cannot reset it: a runtime per file.
      ...(process.env.BENCH_WORKERD ? [] : [workersProject('workers-isolated', ISOLATED, [], true)]),
      {
        plugins: [
          // The retention cleanup Worker (retention.wrangler.toml) as the Worker under test: its
          // RetentionCleanup object is reachable with runInDurableObject. Its own database per
          // file, like the workers project.
          cloudflareTest(async ({ inject }) => ({
            main: './workers/retention/worker.ts',
            wrangler: { configPath: './retention.wrangler.toml' },
            miniflare: {
              bindings: {
                DATABASE_URL: await createFileDatabase(
                  inject('adminUrl'),
                  inject('templateDatabase'),
                  inject('databasePrefix'),
                ),
                NEON_WS_PROXY: inject('wsProxy'),
                LOG_LEVEL: 'warn',
              },
            },
          })),
        ],
        test: {
          name: 'retention',
          testTimeout: 30_000,
          hookTimeout: 60_000,
          include: ['test/retention/**/*.test.ts'],
          setupFiles: ['./test/setup/file-database.ts', './test/setup/tx-retries.ts'],
          // One runtime per worker, as in the workers project: the RetentionCleanup object is
          // this Worker's own here, so a file's end clears it (test/setup/file-database.ts).
          isolate: false,
          fileParallelism: true,
          maxWorkers: WORKERS,
        },
      },
      {
        test: {
          name: 'node',
          testTimeout: 120_000,
          hookTimeout: 120_000,
          environment: 'node',
          include: ['test/node/**/*.test.ts', 'test/**/*.unit.test.ts'],
          // Beside the workerd files, not after them: a project of one worker at a time is
          // run by vitest as a group of its own, at the end (it was 65 s of the run for 28 s
          // of tests). One process per worker for its files (`isolate: false`): a fork per
          // file cost more than most of these files.
          isolate: false,
          fileParallelism: true,
          maxWorkers: WORKERS,
        },
      },
    ],
  },
});
