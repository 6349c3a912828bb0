import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PUMP_RETRY_MS } from '../../durable-objects/actor-host';
import { isolateGate, type Permit } from '../../workers/db/gate';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { enqueueMessage, ensureInstance } from '../../workers/effects/mailbox';
import { effectRegistry } from '../../workers/effects/registry';
import { testPool, uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { admin, buildEvent, installApp, submit } from '../lark/helpers';

/**
 * Issue 35 hole 11: the isolate's connection budget (workers/db/gate.ts) driven to exhaustion
 * through the real runtime, counting what the runtime reports as uncaught.
 *
 * Two kinds are counted. An unhandled rejection inside the isolate (the listener below). And a
 * Durable Object RPC method that rejects: workerd reports each as "uncaught exception; source =
 * Uncaught (in promise)" in the object (measured: a wake whose pump found no place printed
 * `ConnectionBudgetSpent ... at ActorHost.pump`), even though the caller catches it, and no
 * JS listener sees it; the test counts it at the stub, where it arrives as a rejection.
 *
 * The budget is held by taking the gate's permits directly (the Worker's configuration keeps
 * its 256 places; every request here goes through `exports.default.fetch` or a stub), so the
 * exhaustion is exact and held for as long as the test says, never hoped for.
 */
effectRegistry.registerActor<{ seen: number }>({
  type: 'gate-uncaught-test',
  initialState: () => ({ seen: 0 }),
  handle: (_event, s) => ({ seen: ((s as { seen?: number }).seen ?? 0) + 1 }),
});

const unhandled: unknown[] = [];
globalThis.addEventListener('unhandledrejection', (e) => {
  unhandled.push((e as PromiseRejectionEvent).reason);
});

// One connection: a second one opened inside one test's I/O context is cut when that test
// ends, and its loss would be logged (db_pool_error) in the next test's capture.
const direct = testPool(1);
afterAll(() => direct.end());

const held: Permit[] = [];
beforeEach(() => {
  unhandled.length = 0;
});
afterEach(() => {
  for (const p of held.splice(0)) p.release();
  expect(isolateGate.snapshot()).toMatchObject({ held: 0, waitingAnswer: 0, waitingBackground: 0 });
});

/** Takes every place background work may hold (`answers` too: the whole budget). */
async function holdBudget(opts: { answers: boolean }): Promise<void> {
  // Any request configures the gate from the Worker's configuration first.
  await exports.default.fetch('http://test/healthz');
  const { capacity, backgroundCapacity } = isolateGate.snapshot();
  for (let i = 0; i < backgroundCapacity; i++) held.push(await isolateGate.acquire('background', 0));
  if (opts.answers)
    for (let i = backgroundCapacity; i < capacity; i++) held.push(await isolateGate.acquire('answer', 0));
}

/** What a promise came to, without letting a rejection escape. */
function outcome<T>(p: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
  return p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

async function healthz() {
  const started = Date.now();
  const res = await exports.default.fetch('http://test/healthz');
  return { status: res.status, body: (await res.json()) as { db: string }, ms: Date.now() - started };
}

describe('the connection budget exhausted through the runtime (issue 35 hole 11)', () => {
  it('gate.no_uncaught_at_exhaustion: with every place held, concurrent ActorHost wakes (RPC) and /healthz: no RPC rejects, no unhandled rejection; each wake is deferred, logged once, its retry armed, and delivers once places free', async () => {
    const instances: string[] = [];
    for (let i = 0; i < 4; i++) {
      const inst = await ensureInstance(direct, 'gate-uncaught-test', uid('gu'));
      await enqueueMessage(direct, inst, `in:${i}`, 'waits for a place');
      instances.push(inst);
    }
    await holdBudget({ answers: true });
    const logs = captureLogLines({ quiet: true });
    let wakes: Awaited<ReturnType<typeof outcome>>[];
    let checks: Awaited<ReturnType<typeof healthz>>[];
    const woken = Date.now();
    try {
      [wakes, checks] = await Promise.all([
        Promise.all(instances.map((inst) => outcome(actorHostStub(env, inst).wake(inst)))),
        Promise.all(Array.from({ length: 8 }, healthz)),
      ]);
      // Whatever settled late (a pool's end after its answer) settles before the count.
      await direct.query('select 1');
    } finally {
      logs.restore();
    }
    expect(wakes.filter((w) => !w.ok).map((w) => String((w as { error: unknown }).error))).toEqual([]);
    expect(wakes.map((w) => (w as { value: { deferred: boolean } }).value.deferred)).toEqual([
      true,
      true,
      true,
      true,
    ]);
    expect(unhandled.map(String)).toEqual([]);
    // One warning per deferred pump, naming its instance; nothing logged as an error.
    expect(
      logs
        .events('actor_host_pump_deferred')
        .map((l) => [l.level, l.instanceId, l.error?.name])
        .sort(),
    ).toEqual(instances.map((inst) => ['warn', inst, 'ConnectionBudgetSpent']).sort());
    expect(logs.lines.filter((l) => l.level === 'error')).toEqual([]);
    // A busy isolate is healthy (workers/health/routes.ts).
    expect(checks.map((c) => [c.status, c.body.db])).toEqual(Array(8).fill([200, 'busy']));

    // The retry alarm was armed; with the places free it delivers.
    for (const p of held.splice(0)) p.release();
    for (const inst of instances) {
      const host = actorHostStub(env, inst);
      const planned = await runInDurableObject(host, (_o, state) =>
        state.storage.get<number>('alarm:planned'),
      );
      expect(planned).toBeGreaterThan(woken);
      expect(planned).toBeLessThanOrEqual(Date.now() + PUMP_RETRY_MS);
      expect(await runDurableObjectAlarm(host)).toBe(true);
    }
    const { rows } = await direct.query<{ state: string }>(
      'select state from actor_mailbox where instance_id = any($1::text[]) order by instance_id',
      [instances],
    );
    expect(rows.map((r) => r.state)).toEqual(['delivered', 'delivered', 'delivered', 'delivered']);
  });

  it('gate.no_uncaught_webhook_wake: with the background places held, webhook deliveries are answered 200 and their post-answer wakes are deferred (logged once by the host), never a rejected RPC (channel_wake_failed); /healthz answers 200 meanwhile', async () => {
    const app = await installApp();
    const deliveries = await Promise.all(
      Array.from({ length: 3 }, (_, i) =>
        buildEvent(app, { message: { text: `hole 11 #${i}`, chat_id: `oc_${uid('h11')}` } }),
      ),
    );
    await holdBudget({ answers: false });
    const logs = captureLogLines({ quiet: true });
    try {
      const answers = await Promise.all(deliveries.map((d) => submit(app.installationId, d.request)));
      expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
      const check = await healthz();
      expect([check.status, check.body.db]).toEqual([200, 'ok']);
      // Each wake waits out its connect budget at the gate (real time: the gate's own timer);
      // polled, never assumed: until every one has come back one way or the other.
      const settled = () =>
        logs.events('actor_host_pump_deferred').length + logs.events('channel_wake_failed').length;
      for (let i = 0; settled() < deliveries.length; i++) {
        expect(i).toBeLessThan(1500);
        await new Promise((r) => setTimeout(r, 20));
      }
      await direct.query('select 1');
    } finally {
      logs.restore();
    }
    expect(logs.events('channel_wake_failed')).toEqual([]);
    expect(logs.events('actor_host_pump_deferred')).toHaveLength(3);
    expect(logs.lines.filter((l) => l.level === 'error')).toEqual([]);
    expect(unhandled.map(String)).toEqual([]);
  });

  it("gate.handoff_across_requests: places freed in another I/O context (here the test's own) go to requests waiting at the gate, which open their connections in their own context and answer 200; no hang, no unhandled rejection, no place left held", async () => {
    const app = await installApp();
    await holdBudget({ answers: true });
    const answers = Array.from({ length: 4 }, () =>
      outcome(admin(`/${app.installationId}`).then((r) => r.status)),
    );
    // Forced: every request is waiting for a place (their wait is the 4.9 s connect budget).
    for (let i = 0; isolateGate.snapshot().waitingAnswer < answers.length; i++) {
      expect(i).toBeLessThan(2000);
      await new Promise((r) => setTimeout(r, 1));
    }
    // Freed here, in the test's context, as another request's pool end frees them in its own.
    for (let i = 0; i < answers.length; i++) held.pop()!.release();
    const settled = await Promise.all(answers);
    expect(settled).toEqual(Array(4).fill({ ok: true, value: 200 }));
    await direct.query('select 1');
    expect(unhandled.map(String)).toEqual([]);
    for (const p of held.splice(0)) p.release();
    // Their pools end after the answers (waitUntil): every place comes back.
    for (let i = 0; isolateGate.snapshot().held > 0; i++) {
      expect(i).toBeLessThan(2000);
      await new Promise((r) => setTimeout(r, 1));
    }
  });
});
