import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import type { Pool, PoolClient } from '@neondatabase/serverless';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  ConnectionBudgetSpent,
  ConnectionGate,
  isolateGate,
  PERMIT_MAX_HOLD_MS,
} from '../../workers/db/gate';
import { type DbSettings, openPool, type PoolOptions } from '../../workers/db/pool';
import { isConnectionRefusal } from '../../workers/db/refusal';
import { loadConfig } from '../../workers/env';
import worker from '../../workers/index';
import { testPool } from '../helpers/db';
import { changedTables, tableSums } from '../helpers/tables';
import { buildEvent, installApp } from '../lark/helpers';

/**
 * The isolate's connection budget (workers/db/gate.ts): every pool opened with a Worker's
 * configuration takes a place per connection; past the budget a connection waits in the
 * isolate, answers before background work, and a wait that outlasts its budget is a refusal.
 * The gate is the isolate's own (module state), so each test sets the budget it needs through
 * the settings, as a Worker's configuration does, and ends every pool it opens.
 */
const base = loadConfig(env);
const opened: Pool[] = [];
const taken = new Set<PoolClient>();

function gatedPool(capacity: number, options: PoolOptions = {}): Pool {
  const settings: DbSettings = { ...base, DB_ISOLATE_MAX_CONNECTIONS: capacity };
  const pool = openPool(settings, { max: 1, ...options });
  opened.push(pool);
  return pool;
}

/** A connection of `pool`, given back by `give` or after the test (a pool ends only once its connections are back). */
async function take(pool: Pool | Promise<PoolClient>): Promise<PoolClient> {
  const client = await ('connect' in pool ? pool.connect() : pool);
  taken.add(client);
  return client;
}

function give(client: PoolClient, err?: Error): void {
  taken.delete(client);
  client.release(err);
}

/** Resolves once `p` settled; reports whether it is still pending after the server answered another round trip. */
async function pendingAfterRoundTrip(p: Promise<unknown>, probe: Pool): Promise<boolean> {
  let settled = false;
  p.then(
    () => (settled = true),
    () => (settled = true),
  );
  await probe.query('select 1');
  return !settled;
}

afterEach(async () => {
  for (const c of taken) give(c);
  await Promise.all(opened.splice(0).map((p) => p.end()));
  expect(isolateGate.snapshot().held).toBe(0);
});

describe('the isolate connection budget (DB_ISOLATE_MAX_CONNECTIONS)', () => {
  const probe = testPool(1);
  afterAll(() => probe.end());

  it('gate.budget_bounds_connections: past the budget a connection waits in the isolate, not at the server, and gets the first place freed', async () => {
    const answer = { priority: 'answer' } as const;
    const pools = [gatedPool(3, answer), gatedPool(3, answer), gatedPool(3, answer)];
    const held = await Promise.all(pools.map(take));
    expect(isolateGate.snapshot()).toMatchObject({ capacity: 3, held: 3 });

    const fourth = gatedPool(3, answer).connect();
    expect(await pendingAfterRoundTrip(fourth, probe)).toBe(true);
    expect(isolateGate.snapshot()).toMatchObject({ held: 3, waitingAnswer: 1 });

    give(held[0]!);
    await pools[0]!.end();
    const client = await take(fourth);
    expect((await client.query<{ one: number }>('select 1 as one')).rows[0]!.one).toBe(1);
    expect(isolateGate.snapshot()).toMatchObject({ held: 3, waitingAnswer: 0 });
  });

  it('gate.answers_first: background work never takes the places kept for answers, and a waiting answer passes waiting background work', async () => {
    // Capacity 4 keeps half for answers: background work holds at most 2.
    const background = [gatedPool(4), gatedPool(4)];
    const bgClients = await Promise.all(background.map(take));
    const lateBackground = gatedPool(4).connect();
    expect(await pendingAfterRoundTrip(lateBackground, probe)).toBe(true);

    const answers = [gatedPool(4, { priority: 'answer' }), gatedPool(4, { priority: 'answer' })];
    const answerClients = await Promise.all(answers.map(take));
    expect(isolateGate.snapshot()).toMatchObject({ held: 4, heldBackground: 2, waitingBackground: 1 });

    const lateAnswer = gatedPool(4, { priority: 'answer' }).connect();
    expect(await pendingAfterRoundTrip(lateAnswer, probe)).toBe(true);
    expect(isolateGate.snapshot()).toMatchObject({ waitingAnswer: 1, waitingBackground: 1 });

    // The first freed place goes to the answer that came after the background connection.
    give(bgClients[0]!);
    await background[0]!.end();
    await take(lateAnswer);
    expect(await pendingAfterRoundTrip(lateBackground, probe)).toBe(true);

    // An answer's place freed while one background connection is held goes to background work.
    give(answerClients[0]!);
    await answers[0]!.end();
    await take(lateBackground);
    expect(isolateGate.snapshot()).toMatchObject({ held: 4, heldBackground: 2, waitingBackground: 0 });
  });

  it('gate.wait_is_a_refusal: a wait that outlasts its budget fails the connect as a refusal, and the place it never got is not counted', async () => {
    await take(gatedPool(1, { priority: 'answer' }));
    const err = await gatedPool(1, { priority: 'answer', gateWaitMs: 0 })
      .connect()
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(ConnectionBudgetSpent);
    expect(isConnectionRefusal(err)).toBe(true);
    expect(isolateGate.snapshot()).toMatchObject({ held: 1, waitingAnswer: 0 });
  });

  it('gate.released_on_end: ending a pool gives back the places of its connections, idle or discarded', async () => {
    const pool = gatedPool(8, { max: 2 });
    const a = await take(pool);
    const b = await take(pool);
    expect(isolateGate.snapshot().held).toBe(2);
    give(a);
    // A connection released with an error is discarded by the pool: its place comes back too.
    give(b, new Error('discarded by the test'));
    await pool.end();
    expect(isolateGate.snapshot().held).toBe(0);
  });

  it('gate.expired_permit_reclaimed: a place held past PERMIT_MAX_HOLD_MS (a pool never ended) is taken back when someone waits', async () => {
    let now = 1_000_000;
    const gate = new ConnectionGate(1, () => now);
    await gate.acquire('background', 0);
    await expect(gate.acquire('background', 0)).rejects.toBeInstanceOf(ConnectionBudgetSpent);
    now += PERMIT_MAX_HOLD_MS;
    const second = await gate.acquire('background', 0);
    expect(gate.snapshot()).toMatchObject({ held: 1 });
    second.release();
    second.release();
    expect(gate.snapshot()).toMatchObject({ held: 0 });
  });
  it('gate.expired_permits_reclaimed_oldest_first: every place held past the limit is taken back, those younger are kept (the scan stops at the first young one)', async () => {
    let now = 1_000_000;
    const gate = new ConnectionGate(3, () => now);
    await gate.acquire('answer', 0);
    now += 10;
    await gate.acquire('answer', 0);
    now += 10;
    const young = await gate.acquire('answer', 0);
    now += PERMIT_MAX_HOLD_MS - 10; // the first two are past the limit, the third is not
    const next = await gate.acquire('answer', 0);
    expect(gate.snapshot()).toMatchObject({ held: 2 });
    young.release();
    next.release();
    expect(gate.snapshot()).toMatchObject({ held: 0 });
  });
});

describe('the gate hand-off (issue 35 hole 11)', () => {
  it('gate.gone_waiter_dropped: a waiter still queued past its wait (its request cancelled, its timers never ran) is dropped when a place frees, not given a place nobody would take', async () => {
    let now = 1_000_000;
    const gate = new ConnectionGate(1, () => now);
    const first = await gate.acquire('answer', 0);
    const gone = gate.acquire('answer', 100).then(
      () => 'granted',
      (e: unknown) => (e instanceof ConnectionBudgetSpent ? 'refused' : String(e)),
    );
    expect(gate.snapshot()).toMatchObject({ held: 1, waitingAnswer: 1 });
    // Its wait ended more than a second ago and it never looked (same tick: no timer ran).
    now += 100 + 1001;
    first.release();
    expect(gate.snapshot()).toMatchObject({ held: 0, waitingAnswer: 0 });
    expect(await gone).toBe('refused');
  });

  it('gate.waiter_granted_after_its_wait_ends_keeps_it: a place assigned just before the waiter looks is taken, never lost', async () => {
    let now = 1_000_000;
    const gate = new ConnectionGate(1, () => now);
    const first = await gate.acquire('answer', 0);
    const late = gate.acquire('answer', 100);
    now += 150; // past its wait, within the grace: still served
    first.release();
    expect(gate.snapshot()).toMatchObject({ held: 1, waitingAnswer: 0 });
    (await late).release();
    expect(gate.snapshot()).toMatchObject({ held: 0 });
  });
});

describe('the webhook in the isolate connection budget', () => {
  const direct = testPool(2);
  afterAll(() => direct.end());

  async function post(installationId: string, request: { headers: Record<string, string>; body: string }) {
    const ctx = createExecutionContext();
    const res = await worker.fetch(
      new Request(`http://test/lark/events/${installationId}`, { method: 'POST', ...request }),
      { ...env, DB_ISOLATE_MAX_CONNECTIONS: '2' } as typeof env,
      ctx,
    );
    await waitOnExecutionContext(ctx);
    return res;
  }

  it('gate.webhook_waits_for_a_place: an event that finds every connection in use waits in the isolate and is answered 200 once one frees', async () => {
    const app = await installApp();
    const built = await buildEvent(app);
    const held = [gatedPool(2, { priority: 'answer' }), gatedPool(2, { priority: 'answer' })];
    const clients = await Promise.all(held.map(take));
    const answered = post(app.installationId, built.request);
    for (let i = 0; isolateGate.snapshot().waitingAnswer === 0; i++) {
      expect(i).toBeLessThan(1000);
      await direct.query('select 1');
    }
    give(clients[0]!);
    await held[0]!.end();
    const res = await answered;
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true });
  });

  it('gate.webhook_503_when_spent: an event that gets no place within its connect budget is a retryable 503 with Retry-After, and nothing is written', async () => {
    const app = await installApp();
    const built = await buildEvent(app);
    await Promise.all([gatedPool(2, { priority: 'answer' }), gatedPool(2, { priority: 'answer' })].map(take));
    const before = await tableSums(direct);
    const res = await post(app.installationId, built.request);
    expect(res.status).toBe(503);
    const body = (await res.json()) as { error: { code: string; details: { reason: string } } };
    expect(body.error).toMatchObject({ code: 'service_unavailable', details: { reason: 'db_unavailable' } });
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(changedTables(before, await tableSums(direct))).toEqual([]);
  });
});
