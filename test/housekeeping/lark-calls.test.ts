import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { durableRateGate } from '../../workers/lark/rate-limits';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';
import { DAY_MS, runSteps } from './helpers';

/**
 * `lark_call_counts` (migrations/0030_baseline_lark.sql): the rate gate counts each call it admits in the app's
 * row of the UTC day (workers/lark/rate-limits.ts `admit`), and the housekeeping's `lark_calls`
 * step deletes a day's row 7 days after it (workers/lark/call-counts.ts, docs/retention-rules.md).
 */
const pool = testPool(2);
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const BASE = 'https://open.example.test';

async function countsOf(appId: string) {
  const { rows } = await pool.query<{ age: number; calls: string }>(
    `select ((app_now() at time zone 'UTC')::date - day) as age, calls from lark_call_counts
      where app_id = $1 order by day desc`,
    [appId],
  );
  return rows.map((r) => [r.age, Number(r.calls)]);
}

describe('lark_call_counts', () => {
  it('lark_calls.counted_per_day: every admitted call counts once in its UTC day; a call held back by a recorded 429 does not; a heldForMs read counts nothing', async () => {
    const appId = uid('cli');
    const gate = durableRateGate(pool, { apiBase: `${BASE}/`, appId });
    expect(await gate.admit('reactions.create')).toBe(0);
    expect(await gate.admit('reply')).toBe(0);
    expect(await gate.heldForMs('reply')).toBe(0);
    expect(await countsOf(appId)).toEqual([[0, 2]]);
    await gate.limited('reply', 30);
    expect(await gate.admit('reply')).toBeGreaterThan(0);
    expect(await countsOf(appId)).toEqual([[0, 2]]);
    await advanceDbClock(pool, DAY_MS);
    expect(await gate.admit('reply')).toBe(0);
    expect(await countsOf(appId)).toEqual([
      [0, 1],
      [1, 2],
    ]);
  });

  it('lark_calls.retention: a day’s count is deleted 7 days after its day, oldest first, bounded per run; younger ones stay', async () => {
    const appId = uid('cli');
    await pool.query(
      `insert into lark_call_counts (api_base, app_id, day, calls)
       select $1, $2, (app_now() at time zone 'UTC')::date - d, 10 + d from unnest(array[0, 7, 8, 30]) d`,
      [BASE, appId],
    );
    const prune = async () => (await runSteps(pool, ['lark_calls'], { batchRows: 1 })).lark_calls;
    expect(await prune()).toBe(1);
    expect(await countsOf(appId)).toEqual([
      [0, 10],
      [7, 17],
      [8, 18],
    ]);
    expect(await prune()).toBe(1);
    expect(await prune()).toBe(0);
    expect(await countsOf(appId)).toEqual([
      [0, 10],
      [7, 17],
    ]);
    await advanceDbClock(pool, DAY_MS);
    expect(await prune()).toBe(1);
    expect(await countsOf(appId)).toEqual([[1, 10]]);
  });
});
