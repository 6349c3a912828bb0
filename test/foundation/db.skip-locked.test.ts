import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dbNow, withTx } from '../../workers/db/tx';
import { backendPid, setDbClockOffset, testPool, waitUntilBlocked } from '../helpers/db';
import { expectDeadlocks, txRetries } from '../setup/tx-retries';

const pool = testPool();

beforeAll(async () => {
  await pool.query('create table foundation_jobs (id int primary key, claimed_by text)');
  await pool.query('insert into foundation_jobs select g from generate_series(1, 200) g');
});
afterAll(() => pool.end());

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve: () => void = () => undefined;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const CLAIM = `
  with picked as (
    select id from foundation_jobs where claimed_by is null
    order by id limit $2 for update skip locked
  )
  update foundation_jobs j set claimed_by = $1 from picked where j.id = picked.id
  returning j.id`;

describe('database access', () => {
  it('two concurrent SKIP LOCKED claimers never take the same row', async () => {
    // Claimer A holds its claim open while B runs: B must skip A's rows, not wait or share.
    const a = await pool.connect();
    await a.query('begin');
    const aRows = (await a.query<{ id: number }>(CLAIM, ['a', 50])).rows.map((r) => r.id);
    const bRows = await withTx(pool, { budgetMs: 5000 }, async (b) =>
      (await b.query<{ id: number }>(CLAIM, ['b', 50])).rows.map((r) => r.id),
    );
    await a.query('commit');
    a.release();
    expect(aRows).toHaveLength(50);
    expect(bRows).toHaveLength(50);
    expect(aRows.filter((id) => bRows.includes(id))).toEqual([]);
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from foundation_jobs where claimed_by is not null`,
    );
    expect(rows[0]!.n).toBe(100);
  });

  it('withTx bounds lock waits with lock_timeout from its budget', async () => {
    const holder = await pool.connect();
    await holder.query('begin');
    await holder.query('select * from foundation_jobs where id = 1 for update');
    // 55P03 (lock_timeout), not 57014 (the 3 s statement_timeout): the lock budget ended it.
    const attempt = withTx(pool, { budgetMs: 3000, lockTimeoutMs: 200 }, (c) =>
      c.query('select * from foundation_jobs where id = 1 for update'),
    );
    await expect(attempt).rejects.toMatchObject({ code: '55P03' });
    await holder.query('rollback');
    holder.release();
  });

  it('retries a deadlock victim (40P01) from the top and commits', async () => {
    // `other` holds row 11; the racer locks row 10 and stops; `other` asks for row 10 and
    // queues behind the racer; only then does the racer ask for row 11, closing the cycle. Both
    // deadlock checks start after that: the racer's (1 s) runs long before `other`'s (10 s), so
    // the racer is the victim: withTx must roll it back and run it again, which then succeeds.
    expectDeadlocks();
    const other = await pool.connect();
    await other.query(`begin; set local deadlock_timeout = '10s'`);
    await other.query('update foundation_jobs set claimed_by = $1 where id = 11', ['other']);
    const otherPid = await backendPid(other);
    const tenLocked = deferred();
    const closeCycle = deferred();
    const otherCommitted = deferred();
    let attempts = 0;
    const racer = withTx(pool, { budgetMs: 20_000 }, async (c) => {
      attempts += 1;
      // The retry starts once `other` has committed: otherwise it could take row 10 before
      // `other`'s queued update does and deadlock a second time.
      if (attempts > 1) await otherCommitted.promise;
      await c.query('update foundation_jobs set claimed_by = $1 where id = 10', ['racer']);
      if (attempts === 1) {
        tenLocked.resolve();
        await closeCycle.promise;
      }
      await c.query('update foundation_jobs set claimed_by = $1 where id = 11', ['racer']);
      return attempts;
    });
    await tenLocked.promise;
    const otherTakesTen = other.query('update foundation_jobs set claimed_by = $1 where id = 10', ['other']);
    await waitUntilBlocked(pool, otherPid);
    closeCycle.resolve();
    await otherTakesTen; // granted once the victim rolled back
    await other.query('commit');
    other.release();
    otherCommitted.resolve();
    expect(await racer).toBe(2);
    // The harness saw the retry: an undeclared deadlock would fail the test (tx-retries.ts).
    expect(txRetries()).toEqual([{ sqlstate: '40P01', attempt: 1 }]);
  });

  it('moves database time without sleeping', async () => {
    const before = await dbNow(pool);
    await setDbClockOffset(pool, 7 * 24 * 3600 * 1000);
    const after = await dbNow(pool);
    await setDbClockOffset(pool, 0);
    expect(after.getTime() - before.getTime()).toBeGreaterThanOrEqual(7 * 24 * 3600 * 1000);
  });
});
