import type { TestProject } from 'vitest/node';
import { closeFileEmulators, startTestStack } from './stack';

declare module 'vitest' {
  export interface ProvidedContext {
    adminUrl: string;
    /** Migrated template that each workerd test file's own database is copied from. */
    templateDatabase: string;
    /** Prefix of every database this run creates. */
    databasePrefix: string;
    wsProxy: string;
    /** PgBouncer's port when the run goes through it (PGBOUNCER=1), else 0. */
    pgbouncerPort: number;
    /** Server connections PgBouncer gives each file database (0 without PgBouncer). */
    pgbouncerPoolSize: number;
    /** Seed of every randomized test in this run (TEST_SEED to replay one). */
    testSeed: number;
    /** Cases per fuzz route group (FUZZ_RUNS; 0 = the suite's default for `npm test`). */
    fuzzRuns: number;
  }
}

export default async function setup(project: TestProject) {
  const seed = process.env.TEST_SEED ? Number(process.env.TEST_SEED) : Math.floor(Math.random() * 2 ** 31);
  if (!Number.isSafeInteger(seed))
    throw new Error(`TEST_SEED must be an integer, got ${process.env.TEST_SEED}`);
  console.log(`randomized tests: seed ${seed} (replay with TEST_SEED=${seed} npm test)`);
  project.provide('testSeed', seed);
  const fuzzRuns = Number(process.env.FUZZ_RUNS ?? 0);
  if (!Number.isSafeInteger(fuzzRuns) || fuzzRuns < 0)
    throw new Error(`FUZZ_RUNS must be a whole number, got ${process.env.FUZZ_RUNS}`);
  project.provide('fuzzRuns', fuzzRuns);
  const stack = await startTestStack();
  project.provide('adminUrl', stack.adminUrl);
  project.provide('templateDatabase', stack.template);
  project.provide('databasePrefix', stack.prefix);
  project.provide('wsProxy', stack.wsProxy);
  project.provide('pgbouncerPort', stack.pgbouncerPort);
  project.provide('pgbouncerPoolSize', stack.pgbouncerPoolSize);
  return async () => {
    await closeFileEmulators();
    await stack.stop();
  };
}
