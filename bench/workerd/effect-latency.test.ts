// BENCH_WORKERD=1 npx vitest run --project workers bench/workerd/effect-latency.test.ts
//
// Issue 18 item 4: end-to-end effect latency inside workerd, commit → handler start in the
// real ActorHost Durable Object, through the Neon driver and the bridge, as the production
// path runs it: the application commits an effect (fenced commit, with a recovery binding),
// then wakes the instance's host (`wake` after every commit that gives it work); the host
// pumps (mailbox drain, recovery checks, process registration, claim) and runs the handler.
// Prints p50 / p99; asserts nothing about speed (bench, not a test of the contract).
import { env } from 'cloudflare:workers';
import { afterAll, expect, it } from 'vitest';
import { emit } from '../../test/effects/helpers';
import { testPool, uid } from '../../test/helpers/db';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { ensureInstance } from '../../workers/effects/mailbox';
import { effectRegistry } from '../../workers/effects/registry';
import { percentile, round } from '../lib/stats';

const SAMPLES = Number(process.env.BENCH_LATENCY_SAMPLES ?? 200);
const started = new Map<string, number>();

effectRegistry
  .registerActor({ type: 'latency-probe', initialState: () => ({}), handle: (_e, s) => s })
  .registerEffect({
    kind: 'latency.probe',
    run: async (e) => {
      started.set(e.id, performance.now());
      return null;
    },
  });

const pool = testPool();
afterAll(() => pool.end());

it('commit → handler start in the ActorHost, sequential', async () => {
  const inst = await ensureInstance(pool, 'latency-probe', uid('lat'));
  const host = actorHostStub(env, inst);
  await host.wake(inst); // the host's first pump (its isolate, its pool) is not a sample
  const samples: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const [h] = await emit(pool, inst, [
      { kind: 'latency.probe', opts: { recovery: { operation: 'replace' } } },
    ]);
    const committed = performance.now();
    await host.wake(inst);
    samples.push(started.get(h!.effectId)! - committed);
  }
  expect(samples).toHaveLength(SAMPLES);
  console.log(
    JSON.stringify({
      bench: 'effect commit → handler start (workerd ActorHost, sequential)',
      n: samples.length,
      p50ms: round(percentile(samples, 50), 1),
      p99ms: round(percentile(samples, 99), 1),
    }),
  );
}, 300_000);
