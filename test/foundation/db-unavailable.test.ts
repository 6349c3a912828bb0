import { env, exports } from 'cloudflare:workers';
import { Hono } from 'hono';
import { afterAll, describe, expect, it } from 'vitest';
import type { AppEnv } from '../../workers/context';
import { isDatabaseUnavailable } from '../../workers/db/refusal';
import { withStatement } from '../../workers/db/tx';
import { renderError } from '../../workers/middleware';
import { backendPid, blockedBehind, testPool } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { expectDeadlocks, txRetries } from '../setup/tx-retries';

const pool = testPool(4);
afterAll(() => pool.end());

function putWorkspace(id: string) {
  return exports.default.fetch(`http://test/admin/workspaces/${id}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${env.ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: id }),
  });
}

/**
 * Found by the chaos run (chaos/, `db_cut_at`): a database connection dropped mid-statement
 * was rendered as 500 `internal_error` (and logged as `unhandled_error`) on the webhook and
 * on /v1 writes. It is the database being unavailable, not a bug: 503 + Retry-After.
 */
describe('a database connection lost mid-statement', () => {
  it('answers 503 service_unavailable with Retry-After, logged as db_unavailable, nothing written', async () => {
    const holder = await pool.connect();
    const logs = captureLogLines({ quiet: true });
    try {
      await holder.query('begin');
      await holder.query('lock table private.workspaces in access exclusive mode');
      const answer = putWorkspace('ws-cut-mid-statement');
      // The request's statement waits on the lock: the server ends that backend under it.
      const victim = await blockedBehind(pool, await backendPid(holder));
      await pool.query('select pg_terminate_backend($1)', [victim]);
      const res = await answer;
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('service_unavailable');
    } finally {
      await holder.query('rollback');
      holder.release();
      logs.restore();
    }
    expect(logs.events('unhandled_error')).toEqual([]);
    expect(logs.events('db_unavailable')).toHaveLength(1);
    const { rows } = await pool.query('select 1 from private.workspaces where id = $1', [
      'ws-cut-mid-statement',
    ]);
    expect(rows).toEqual([]);
    // The same request succeeds once the database answers again.
    expect((await putWorkspace('ws-cut-mid-statement')).status).toBe(200);
  });

  it('classifies the driver errors of a dropped socket, and not a constraint violation', () => {
    expect(isDatabaseUnavailable(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isDatabaseUnavailable(new Error('Network connection lost.'))).toBe(true);
    expect(isDatabaseUnavailable(Object.assign(new Error('canceling statement'), { code: '57014' }))).toBe(
      true,
    );
    expect(isDatabaseUnavailable(Object.assign(new Error('x'), { code: '08006' }))).toBe(true);
    expect(isDatabaseUnavailable(Object.assign(new Error('duplicate key'), { code: '23505' }))).toBe(false);
    expect(isDatabaseUnavailable(new Error('Cannot read properties of undefined'))).toBe(false);
  });
});

/**
 * A deadlock (or serialization failure) is retried while the budget allows. One detected too
 * late to retry (Postgres reports a deadlock `deadlock_timeout`, 1 s, after the wait began; the
 * webhook's budget is 1.5 s) was rethrown and rendered as 500 `internal_error`, logged
 * `unhandled_error` (seen in CI: webhook.atomic under load). The statement rolled back and
 * wrote nothing, so it is the retryable 503, and the abandoned retry is logged once.
 */
describe('a retryable failure the retry loop gives up on', () => {
  it('is logged once as db_tx_retry_abandoned and answers 503 with Retry-After, not 500', async () => {
    expectDeadlocks();
    const deadlock = () => Object.assign(new Error('deadlock detected'), { code: '40P01' });
    const app = new Hono<AppEnv>();
    app.onError(renderError);
    app.get('/stmt', async () => {
      await withStatement({ budgetMs: 1500, maxAttempts: 1 }, async () => {
        throw deadlock();
      });
      return new Response('unreachable');
    });
    const logs = captureLogLines({ quiet: true });
    let res: Response;
    try {
      res = await app.request('/stmt');
    } finally {
      logs.restore();
    }
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('5');
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('service_unavailable');
    expect(logs.events('unhandled_error')).toEqual([]);
    expect(logs.events('db_tx_retry_abandoned')).toHaveLength(1);
    expect(txRetries()).toEqual([{ sqlstate: '40P01', attempt: 1, abandoned: true }]);
    expect(isDatabaseUnavailable(Object.assign(new Error('x'), { code: '40001' }))).toBe(true);
  });
});
