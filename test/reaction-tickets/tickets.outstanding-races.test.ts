import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import type { PoolClient } from '@neondatabase/serverless';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { ISSUANCE_LOCK_SQL, OPERATION_LOCK_SQL } from '../../workers/reaction-tickets/locks';
import { blockedBehindAll, lockHolders, testPool } from '../helpers/db';
import { call, opId, PATIENT, type Reply, seedWorld, type World } from './helpers';

/**
 * The per-actor outstanding bound (REACTION_TICKET_MAX_OUTSTANDING) under concurrency: every
 * race is forced by holding a lock the requests need and releasing it once they wait on it.
 */
const pool = testPool();
const hold = lockHolders(pool);
afterAll(() => pool.end());

function asker(
  w: World,
  max: number,
  opts: { actor?: number; desired?: 'present' | 'absent'; env?: Record<string, string> } = {},
) {
  const bounds = {
    ...PATIENT,
    REACTION_TICKET_MAX_OUTSTANDING: String(max),
    REACTION_TICKET_RATE_PER_MINUTE: '1000',
    ...opts.env,
  };
  return (op: string, i: number): Promise<Reply> =>
    call('POST', '/v1/reaction-tickets', {
      token: w.tokens[opts.actor ?? 0]!,
      env: bounds,
      body: {
        operationId: op,
        messageId: w.messages[0]!,
        emoji: `e${i}`,
        desired: opts.desired ?? 'present',
      },
    });
}

async function ticketsOf(actorId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    'select count(*)::int as n from private.reaction_tickets where actor_id = $1',
    [actorId],
  );
  return rows[0]!.n;
}

describe('the per-actor outstanding bound under concurrency', () => {
  it('in-flight issuances blocked mid-transaction cannot be counted out: a third request over a bound of 2 does not make 3 tickets', async () => {
    const w = await seedWorld();
    const ask = asker(w, 2);
    const [a, b, c] = [opId(), opId(), opId()];
    // a and b get past every check before their transaction and then wait on their operation locks.
    const holder = await hold(OPERATION_LOCK_SQL, [
      [w.actors[0], a],
      [w.actors[0], b],
    ]);
    const pa = ask(a, 1);
    const pb = ask(b, 2);
    await blockedBehindAll(pool, holder.pid, 2, 15_000);
    const third = await ask(c, 3);
    await holder.query('commit');
    const [ra, rb] = await Promise.all([pa, pb]);
    const statuses = [ra.status, rb.status, third.status];
    expect(await ticketsOf(w.actors[0]!), JSON.stringify(statuses)).toBeLessThanOrEqual(2);
    expect(statuses.filter((s) => s === 201)).toHaveLength(2);
    expect(statuses.filter((s) => s === 429)).toHaveLength(1);
  });

  it('eight racers released together from the per-actor issuance lock issue exactly the bound', async () => {
    const w = await seedWorld();
    const ask = asker(w, 3);
    const holder = await hold(ISSUANCE_LOCK_SQL, [[w.actors[0]]]);
    const pending = Array.from({ length: 8 }, (_, i) => ask(opId(), i));
    // Through PgBouncer (PGBOUNCER=1) only its pool's server connections can reach the lock;
    // the other racers queue in PgBouncer and reach it as connections free up.
    const serverConnections = inject('pgbouncerPoolSize') || Number.POSITIVE_INFINITY;
    await blockedBehindAll(pool, holder.pid, Math.min(8, serverConnections), 15_000);
    await holder.query('commit');
    const replies = await Promise.all(pending);
    const statuses = replies.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 201, 201, 429, 429, 429, 429, 429]);
    for (const r of replies.filter((x) => x.status === 429)) {
      expect(r.body.error.code).toBe('quota_exceeded');
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
    expect(await ticketsOf(w.actors[0]!)).toBe(3);
  });

  it('a Durable Object reset that loses its state does not reopen slots, for any actor of the workspace', async () => {
    const w = await seedWorld(2);
    const asks = [asker(w, 2), asker(w, 2, { actor: 1 })];
    for (const ask of asks) {
      expect((await ask(opId(), 1)).status).toBe(201);
      expect((await ask(opId(), 2)).status).toBe(201);
    }
    const quota = env.WORKSPACE_QUOTA.get(env.WORKSPACE_QUOTA.idFromName(w.workspaceId));
    await runInDurableObject(quota, (_, state) => state.storage.deleteAll());
    await runInDurableObject(quota, (_, state) => state.abort('reset by test')).catch(() => undefined);
    for (const [i, ask] of asks.entries()) {
      const over = await ask(opId(), 3);
      expect(over.status, JSON.stringify(over.body)).toBe(429);
      expect(over.body.error.code).toBe('quota_exceeded');
      expect(await ticketsOf(w.actors[i]!)).toBe(2);
    }
  });
});

/**
 * Issue 15 item 2: a slot is released only when its ticket ends (applies, retires, expires).
 * Before the database owned the bound, any error on a ticket request released the request's
 * operation slot at the Durable Object, even when that operation's ticket was still live.
 */
describe('a live ticket keeps its slot whatever its re-requests meet', () => {
  it('a re-request of a live operation that fails (lock timeout, 503) does not free its slot', async () => {
    const w = await seedWorld();
    const ask = asker(w, 1);
    const live = opId();
    expect((await ask(live, 1)).status).toBe(201);
    // The re-request (a lost answer, retried) waits on its operation lock and times out.
    const holder = await hold(OPERATION_LOCK_SQL, [[w.actors[0], live]]);
    const impatient = asker(w, 1, {
      env: { REACTION_LOCK_TIMEOUT_MS: '200', REACTION_TX_BUDGET_MS: '5000' },
    });
    const retried = impatient(live, 1);
    await blockedBehindAll(pool, holder.pid, 1, 15_000);
    const failed = await retried;
    expect(failed.status, JSON.stringify(failed.body)).toBe(503);
    await holder.query('commit');
    const next = await ask(opId(), 2);
    expect(next.status, JSON.stringify(next.body)).toBe(429);
    expect(next.body.error.code).toBe('quota_exceeded');
    expect(await ticketsOf(w.actors[0]!)).toBe(1);
  });

  it('a re-request of a live operation with another intent (409) does not free its slot', async () => {
    const w = await seedWorld();
    const ask = asker(w, 1);
    const live = opId();
    expect((await ask(live, 1)).status).toBe(201);
    const other = await asker(w, 1, { desired: 'absent' })(live, 1);
    expect(other.status).toBe(409);
    expect(other.body.error.code).toBe('intent_mismatch');
    const next = await ask(opId(), 2);
    expect(next.status, JSON.stringify(next.body)).toBe(429);
    expect(await ticketsOf(w.actors[0]!)).toBe(1);
  });

  it('a new operation whose request fails takes no slot; a slot frees only when a ticket ends', async () => {
    const w = await seedWorld();
    const ask = asker(w, 1);
    const first = opId();
    const holder = await hold(OPERATION_LOCK_SQL, [[w.actors[0], first]]);
    const impatient = asker(w, 1, {
      env: { REACTION_LOCK_TIMEOUT_MS: '200', REACTION_TX_BUDGET_MS: '5000' },
    });
    const pending = impatient(first, 1);
    await blockedBehindAll(pool, holder.pid, 1, 15_000);
    expect((await pending).status).toBe(503);
    await holder.query('commit');
    const live = opId();
    const issued = await ask(live, 2);
    expect(issued.status).toBe(201);
    expect((await ask(opId(), 3)).status).toBe(429);
    // Retiring the live ticket ends it: exactly one slot frees.
    const retired = await call('POST', `/v1/reaction-operations/${live}/retire`, {
      token: w.tokens[0]!,
      body: { ticket: issued.body.ticket },
    });
    expect(retired.status).toBe(200);
    expect((await ask(opId(), 4)).status).toBe(201);
    expect((await ask(opId(), 5)).status).toBe(429);
  });
});
