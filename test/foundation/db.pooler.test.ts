import { env } from 'cloudflare:workers';
import { Client } from '@neondatabase/serverless';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { oneShots, openPool } from '../../workers/db/pool';
import { withTx } from '../../workers/db/tx';
import { testPool } from '../helpers/db';
import { countRoundTrips } from '../helpers/round-trips';
import { opId, put, seedWorld, ticketFor } from '../reaction-tickets/helpers';

/**
 * Statement budgets without session state: what Neon's pooled endpoint (PgBouncer in
 * transaction mode) requires. On a PGBOUNCER=1 run (.ci/run) `env.DATABASE_URL` goes through
 * PgBouncer with 4 server connections for this file's database; otherwise it is direct, and
 * the same budgets must hold there too.
 */
const viaPgBouncer = inject('pgbouncerPort') > 0;
const control = testPool();
/** A pool on the Worker's own URL, as production code opens it. */
function appPool(statementTimeoutMs: number, max = 4) {
  return openPool(
    { DATABASE_URL: env.DATABASE_URL!, NEON_WS_PROXY: env.NEON_WS_PROXY, DB_STATEMENT_TIMEOUT_MS: 15_000 },
    { max, statementTimeoutMs },
  );
}

beforeAll(async () => {
  await control.query('create table pooler_rows (id int primary key)');
});
afterAll(() => control.end());

describe('statement budgets through a transaction pooler', () => {
  it('a one-shot pool.query runs under its pool budget: a longer statement fails with 57014', async () => {
    const pool = appPool(200);
    try {
      const err = await pool.query('select pg_sleep(3)').then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toMatchObject({ code: '57014' });
      // The connection is still good: the budget ended with the statement.
      expect((await pool.query<{ n: number }>('select $1::int as n', [7])).rows).toEqual([{ n: 7 }]);
    } finally {
      await pool.end();
    }
  });

  it('a one-shot waits for a lock no longer than its budget (55P03 or 57014)', async () => {
    const locker = await control.connect();
    const pool = appPool(300);
    try {
      await locker.query('begin; lock table pooler_rows in exclusive mode');
      const insert = pool.query('insert into pooler_rows values (1)').then(
        () => undefined,
        (e: unknown) => e,
      );
      // Either timer may end the wait (both are the pool's budget); without a budget the
      // insert would wait for the rollback below, after it.
      expect(['55P03', '57014']).toContain(((await insert) as { code?: string } | undefined)?.code);
    } finally {
      await locker.query('rollback');
      locker.release();
      await pool.end();
    }
    expect((await control.query('select 1 from pooler_rows')).rows).toHaveLength(0);
  });

  it("oneShots runs each statement under its own budget, not the pool's, read at each call when a function", async () => {
    const pool = appPool(15_000);
    let statementMs = 200;
    const q = oneShots(pool, () => ({ statementMs, lockMs: statementMs }));
    try {
      const slow = (sql: string) =>
        q.query(sql).then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(await slow('select pg_sleep(3)')).toMatchObject({ code: '57014' });
      statementMs = 2_000;
      expect(await slow('select pg_sleep(0.4)')).toBeUndefined();
      // Each call its own transaction: nothing of the budget stays on the server connection.
      expect(
        (await pool.query<{ t: string }>('select current_setting($1) as t', ['statement_timeout'])).rows,
      ).toEqual([{ t: '15s' }]);
    } finally {
      await pool.end();
    }
  });

  it('withTx runs every statement under its budget: a longer one fails with 57014', async () => {
    const pool = appPool(15_000);
    try {
      const err = await withTx(pool, { budgetMs: 200 }, (c) => c.query('select pg_sleep(3)')).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toMatchObject({ code: '57014' });
    } finally {
      await pool.end();
    }
  });

  it('withTx sends its begin and budget with the first statement: n statements are n + 1 round trips, all in one transaction under the budget', async () => {
    const pool = appPool(15_000);
    try {
      const trips = countRoundTrips(pool);
      const seen = await withTx(
        pool,
        { budgetMs: 900, lockTimeoutMs: 300, isolation: 'repeatable read' },
        async (c) => {
          const first = await c.query<{ x: string; s: string; l: string; iso: string }>(
            `select txid_current()::text as x, current_setting('statement_timeout') as s,
                  current_setting('lock_timeout') as l, current_setting($1) as iso`,
            ['transaction_isolation'],
          );
          const second = await c.query<{ x: string }>('select txid_current()::text as x');
          return { ...first.rows[0]!, second: second.rows[0]!.x };
        },
      );
      trips.stop();
      expect(trips.texts).toHaveLength(3);
      expect(trips.texts[0]).toMatch(/^begin; select txid_current/);
      expect(trips.texts[2]).toBe('commit');
      expect(seen.second).toBe(seen.x);
      expect(seen.iso).toBe('repeatable read');
      expect(seen.l).toBe('300ms');
      // What was left of 900 ms at the first statement.
      expect(Number.parseInt(seen.s, 10)).toBeGreaterThan(0);
      expect(Number.parseInt(seen.s, 10)).toBeLessThanOrEqual(900);
      // A transaction that failed at its first statement rolls back and runs nothing else.
      await expect(
        withTx(pool, { budgetMs: 900 }, async (c) => {
          await c.query('insert into pooler_rows values ($1), ($1)', [5]);
        }),
      ).rejects.toMatchObject({ code: '23505' });
      expect((await pool.query('select 1 from pooler_rows where id = 5')).rows).toEqual([]);
      // A first statement without parameters may be several (simple protocol only): it gets
      // its own begin round trip, and runs inside the transaction all the same.
      const several = countRoundTrips(pool);
      const local = await withTx(pool, { budgetMs: 900 }, async (c) => {
        await c.query("set local work_mem = '8MB'; set local enable_seqscan = off");
        const { rows } = await c.query<{ w: string; x: string }>(
          "select current_setting('work_mem') as w, current_setting($1) as x",
          ['enable_seqscan'],
        );
        return rows[0];
      });
      several.stop();
      expect(local).toEqual({ w: '8MB', x: 'off' });
      expect(several.texts).toHaveLength(4);
    } finally {
      await pool.end();
    }
  });

  it('withTx bounds an abandoned transaction: idle_in_transaction_session_timeout is set for it', async () => {
    const pool = appPool(15_000);
    try {
      const idle = await withTx(pool, { budgetMs: 400 }, async (c) => {
        const { rows } = await c.query<{ ms: number }>(
          `select extract(epoch from current_setting('idle_in_transaction_session_timeout')::interval) * 1000 as ms`,
        );
        return Number(rows[0]!.ms);
      });
      // Twice what was left of the budget at begin: never 0 (no limit), never above 800 ms.
      expect(idle).toBeGreaterThan(0);
      expect(idle).toBeLessThanOrEqual(800);
    } finally {
      await pool.end();
    }
  });

  it('no budget outlives its statement or transaction: the server connection keeps the server default', async () => {
    // One connection: directly, every step below runs on the same backend.
    const pool = appPool(250, 1);
    try {
      await pool.query('select 1');
      await withTx(pool, { budgetMs: 300, lockTimeoutMs: 100 }, (c) => c.query('select 1'));
      const client = await pool.connect();
      try {
        // A bare statement on the client (no wrapper, no transaction): what is left behind.
        const { rows } = await client.query<{ s: string; l: string; i: string }>(
          `select current_setting('statement_timeout') as s, current_setting('lock_timeout') as l,
                  current_setting('idle_in_transaction_session_timeout') as i`,
        );
        // The same on a fresh direct session: the server's own defaults.
        const fresh = await control.connect();
        const { rows: server } = await fresh
          .query<{ s: string; l: string; i: string }>(
            `select current_setting('statement_timeout') as s, current_setting('lock_timeout') as l,
                    current_setting('idle_in_transaction_session_timeout') as i`,
          )
          .finally(() => fresh.release());
        expect(rows[0]).toEqual(server[0]);
        expect(rows[0]!.s).not.toBe('250ms');
      } finally {
        client.release();
      }
    } finally {
      await pool.end();
    }
  });

  it.runIf(viaPgBouncer)(
    'the pooler refuses startup parameters (as Neon does), and the pools send none',
    async () => {
      const client = new Client({ connectionString: env.DATABASE_URL!, statement_timeout: 1000 });
      client.on('error', () => undefined);
      await expect(client.connect()).rejects.toThrow(/unsupported startup parameter/);
      await client.end().catch(() => undefined);
      const pool = appPool(1000);
      try {
        expect((await pool.query('select 1 as one')).rows).toEqual([{ one: 1 }]);
      } finally {
        await pool.end();
      }
    },
  );

  it('32 concurrent ticket writes through the pooler all succeed (4 server connections on a PGBOUNCER=1 run)', async () => {
    const n = 32;
    const w = await seedWorld(n, n);
    const intents = w.actors.map((_, i) => ({
      messageId: w.messages[i]!,
      emoji: '🚦',
      desired: 'present' as const,
    }));
    const ops = w.actors.map(() => opId());
    const tickets = await Promise.all(w.actors.map((_, i) => ticketFor(w.tokens[i]!, ops[i]!, intents[i]!)));
    const replies = await Promise.all(
      w.actors.map((_, i) => put(w.tokens[i]!, ops[i]!, tickets[i]!, intents[i]!)),
    );
    expect(replies.map((r) => r.status)).toEqual(Array(n).fill(200));
    const { rows } = await control.query<{ n: number }>(
      'select count(*)::int as n from private.chat_reaction_operations where operation_id = any($1)',
      [ops],
    );
    expect(rows[0]!.n).toBe(n);
  });
});
