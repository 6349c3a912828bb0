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
    /** Seed of every randomized test in this run (TEST_SEED to replay one). */
    testSeed: number;
  }
}

export default async function setup(project: TestProject) {
  const seed = process.env.TEST_SEED ? Number(process.env.TEST_SEED) : Math.floor(Math.random() * 2 ** 31);
  if (!Number.isSafeInteger(seed))
    throw new Error(`TEST_SEED must be an integer, got ${process.env.TEST_SEED}`);
  console.log(`randomized tests: seed ${seed} (replay with TEST_SEED=${seed} npm test)`);
  project.provide('testSeed', seed);
  const stack = await startTestStack();
  project.provide('adminUrl', stack.adminUrl);
  project.provide('templateDatabase', stack.template);
  project.provide('databasePrefix', stack.prefix);
  project.provide('wsProxy', stack.wsProxy);
  return async () => {
    await closeFileEmulators();
    await stack.stop();
  };
}
