import { afterEach, beforeEach, expect } from 'vitest';
import { onTxRetry, type TxRetry } from '../../workers/db/tx';

/**
 * `withTx` retries deadlocks (40P01), which in production is right, but in a test it hides
 * the bug the test exists for: two paths that take locks in different orders. Every retry
 * in a test is recorded; a test fails when a deadlock happened that it did not declare
 * with `expectDeadlocks()`.
 */
const retries: TxRetry[] = [];
let deadlocksExpected = false;
onTxRetry((retry) => retries.push(retry));

/** Declares that this test provokes deadlocks on purpose (db.skip-locked and webhook.atomic do). */
export function expectDeadlocks(): void {
  deadlocksExpected = true;
}

/** The retries recorded so far in the current test. */
export function txRetries(): readonly TxRetry[] {
  return retries;
}

beforeEach(() => {
  retries.length = 0;
  deadlocksExpected = false;
});

afterEach(() => {
  const deadlocks = retries.filter((r) => r.sqlstate === '40P01');
  if (!deadlocksExpected)
    expect(deadlocks, 'a deadlock was retried by withTx in a test that did not expect one').toEqual([]);
});
