import { afterAll, afterEach, expect, it } from 'vitest';
import { sqlState, withTx } from '../../workers/db/tx';
import { commitActor } from '../../workers/effects/commit';
import { EffectStage } from '../../workers/effects/emit';
import { loadInstance, pruneMailbox } from '../../workers/effects/mailbox';
import { heartbeat, pruneProcesses, registerProcess, stopProcess } from '../../workers/effects/processes';
import {
  processRecoveryChecks,
  pruneEffects,
  requestEffectRecovery,
  runRecoveryPass,
} from '../../workers/effects/recovery';
import { claimEffects, completeEffects, failEffects } from '../../workers/effects/scheduler';
import type { EffectHandle } from '../../workers/effects/types';
import { AppError } from '../../workers/errors';
import { setDbClockOffset, testPool } from '../helpers/db';
import { generator, testSeed } from '../helpers/random';
import { txRetries } from '../setup/tx-retries';
import { ageHeartbeat, config, newInstance } from './helpers';

const pool = testPool(10);
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const OPS_PER_WORKER = 50;
const WORKERS = 8;
const EXPECTED = new Set(['revision_conflict', 'gone']);

it('hundreds of concurrent emit/claim/complete/fail/poll/check/prune operations: no deadlock, every invariant held', async () => {
  // One generator per worker, derived from the run's seed: the same seed replays each
  // worker's sequence of operations and draws, however the workers interleave.
  const seed = testSeed();
  const instances = await Promise.all(Array.from({ length: 6 }, () => newInstance(pool, 'rand')));
  const procs = await Promise.all(Array.from({ length: 4 }, () => registerProcess(pool, 'rand')));
  const handles: EffectHandle[] = [];
  const cfg = { ...config, staleAfterMs: 30_000, claimScanLimit: 20 };
  const unexpected: unknown[] = [];
  const counts: Record<string, number> = {};
  // Counted as they happen: pruning may delete completed effects before the end.
  let completedInRun = 0;

  /** The operations, drawing only from `rand`: one worker's own generator. */
  const opsFor = (rand: () => number): Record<string, () => Promise<unknown>> => {
    const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)]!;
    return {
      emit: async () => {
        const inst = pick(instances);
        const row = await loadInstance(pool, inst);
        const stage = new EffectStage(inst);
        for (let i = 0, n = 1 + Math.floor(rand() * 3); i < n; i++) {
          const r = rand();
          const opts =
            r < 0.5
              ? {
                  recovery: { operation: 'replace', ...(rand() < 0.3 ? { timeoutMs: 60_000 } : {}) },
                  maxAttempts: 3,
                }
              : r < 0.7
                ? { status: { operation: 'probe' }, maxAttempts: 3 }
                : { maxAttempts: 2 };
          handles.push(stage.emit('noop', { i }, opts));
        }
        await withTx(pool, { budgetMs: 5000 }, (tx) =>
          commitActor(
            tx,
            {
              instanceId: inst,
              expectedRevision: row!.revision,
              state: { n: Number(row!.revision) + 1 },
              effects: stage.staged,
            },
            cfg,
          ),
        );
      },
      claim: () => claimEffects(pool, pick(procs), { limit: 3 }),
      complete: async () => {
        const p = pick(procs);
        const { rows } = await pool.query<{ id: string }>(
          "select id from effects where locked_by = $1 and status = 'processing' limit 3",
          [p],
        );
        // Sometimes complete with the wrong owner: a late write that must be rejected.
        const { accepted } = await completeEffects(
          pool,
          rand() < 0.2 ? pick(procs) : p,
          rows.map((r) => ({ id: r.id, result: { ok: true } })),
        );
        completedInRun += accepted.length;
      },
      fail: async () => {
        const p = pick(procs);
        const { rows } = await pool.query<{ id: string }>(
          "select id from effects where locked_by = $1 and status = 'processing' limit 2",
          [p],
        );
        await failEffects(
          pool,
          p,
          rows.map((r) => ({ id: r.id, error: 'boom' })),
        );
      },
      poll: () => runRecoveryPass(pool, cfg),
      check: async () => {
        const bound = handles.filter((_, i) => i % 2 === 0);
        if (bound.length === 0) return;
        const h = pick(bound);
        await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, h.instanceId, h));
        await processRecoveryChecks(pool, h.instanceId, cfg);
      },
      stale: () => ageHeartbeat(pool, pick(procs), 40_000 + Math.floor(rand() * 60_000)),
      heartbeat: () => heartbeat(pool, pick(procs)),
      stop: async () => {
        if (rand() < 0.5) return;
        const p = pick(procs);
        await stopProcess(pool, p);
        procs[procs.indexOf(p)] = await registerProcess(pool, 'rand');
      },
      prune: async () => {
        await pruneProcesses(pool, 50_000);
        await pruneEffects(pool, 0);
        await pruneMailbox(pool, 0);
      },
    };
  };
  const weights: [string, number][] = [
    ['emit', 5],
    ['claim', 5],
    ['complete', 4],
    ['fail', 2],
    ['poll', 3],
    ['check', 2],
    ['stale', 2],
    ['heartbeat', 2],
    ['stop', 1],
    ['prune', 1],
  ];
  const total = weights.reduce((s, [, w]) => s + w, 0);
  const choose = (rand: () => number) => {
    let r = rand() * total;
    for (const [name, w] of weights) {
      r -= w;
      if (r < 0) return name;
    }
    return 'emit';
  };
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      const rand = generator(seed, w);
      const ops = opsFor(rand);
      for (let i = 0; i < OPS_PER_WORKER; i++) {
        const name = choose(rand);
        counts[name] = (counts[name] ?? 0) + 1;
        try {
          await ops[name]!();
        } catch (err) {
          if (err instanceof AppError && EXPECTED.has(err.code)) continue;
          unexpected.push({ worker: w, op: i, name, code: sqlState(err), message: (err as Error).message });
        }
      }
    }),
  );
  expect(unexpected, `seed ${seed}`).toEqual([]);

  // Quiesce: whatever the interleaving left claimed, plus one recovery-bound effect claimed
  // now, is owned by processes that all went stale; one recovery pass retires it. Claims
  // refresh their owner's heartbeat, so whether the random phase itself retired anything
  // depends on how the workers interleaved (under load it sometimes did not); the
  // invariants below must never be checked over zero retirements.
  const [last] = instances;
  const lastRow = await loadInstance(pool, last!);
  const stage = new EffectStage(last!);
  handles.push(stage.emit('noop', { quiesce: true }, { recovery: { operation: 'replace' }, maxAttempts: 3 }));
  await withTx(pool, { budgetMs: 5000 }, (tx) =>
    commitActor(
      tx,
      {
        instanceId: last!,
        expectedRevision: lastRow!.revision,
        state: { n: Number(lastRow!.revision) + 1 },
        effects: stage.staged,
      },
      cfg,
    ),
  );
  while ((await claimEffects(pool, procs[0]!, { limit: 50 })).length > 0);
  for (const p of procs) await ageHeartbeat(pool, p, 100_000);
  await runRecoveryPass(pool, cfg);

  // No deadlock: withTx would have retried it silently; the harness records every retry.
  expect(
    txRetries().filter((r) => r.sqlstate === '40P01'),
    `seed ${seed}`,
  ).toEqual([]);

  // Invariants, over this test's instances only.
  const scope = [instances];
  const q = async (sql: string) => (await pool.query(sql, scope)).rows;
  // Every retirement has exactly one recovery message, and nothing else has one.
  expect(
    await q(`select r.effect_id, (select count(*) from actor_mailbox m where m.instance_id = r.origin_instance_id
                 and m.message_key = 'effect:' || r.effect_id || ':recovery')::int as n, r.retired_at_ms
               from effect_recoveries r where r.origin_instance_id = any($1::text[])
                and ((r.retired_at_ms is null) <> ((select count(*) from actor_mailbox m where m.instance_id = r.origin_instance_id
                 and m.message_key = 'effect:' || r.effect_id || ':recovery') = 0)
                  or (select count(*) from actor_mailbox m where m.instance_id = r.origin_instance_id
                 and m.message_key = 'effect:' || r.effect_id || ':recovery') > 1)`),
    `seed ${seed}`,
  ).toEqual([]);
  // A retired effect still present is stored completed without a result or claim.
  expect(
    await q(`select e.id from effects e join effect_recoveries r on r.effect_id = e.id
              where r.origin_instance_id = any($1::text[]) and r.retired_at_ms is not null
                and (e.status <> 'completed' or e.result is not null or e.locked_by is not null)`),
  ).toEqual([]);
  // Only recovery-bound effects were retired: never an unbound or a status-only one.
  expect(
    await q(`select effect_id from effect_recoveries where origin_instance_id = any($1::text[])
              and retired_at_ms is not null and recovery_operation is null`),
  ).toEqual([]);
  // Each resolved check has exactly one response; open checks none.
  expect(
    await q(`select c.id from effect_recovery_checks c where c.origin_instance_id = any($1::text[])
              and (select count(*) from actor_mailbox m where m.instance_id = c.origin_instance_id
                    and m.message_key = 'effect:' || c.effect_id || ':check:' || c.id)
                  <> case when c.outcome is null then 0 else 1 end`),
  ).toEqual([]);
  // Processing effects have an owner row (pruning keeps owners).
  expect(
    await q(`select e.id from effects e where e.origin_instance_id = any($1::text[]) and e.status = 'processing'
              and not exists (select 1 from effect_processes p where p.id = e.locked_by)`),
  ).toEqual([]);
  // Every revision counts exactly the commits that won their fence.
  expect(
    await q(`select id from actor_instances where id = any($1::text[]) and (state->>'n')::bigint is distinct from revision
              and revision > 0`),
  ).toEqual([]);
  // The run exercised the interesting paths, not just the happy ones.
  const [stats] = await q(`select
      (select count(*) from effect_recoveries where origin_instance_id = any($1::text[]) and retired_at_ms is not null)::int as retired,
      (select count(*) from effect_recovery_checks where origin_instance_id = any($1::text[]) and outcome is not null)::int as checks`);
  stats.completed = completedInRun;
  console.log(JSON.stringify({ seed, counts, ...stats }));
  // The run exercised each interesting path, so the invariants above were not vacuous.
  expect(stats, `seed ${seed}`).toMatchObject({
    retired: expect.toSatisfy((n: number) => n > 0),
    checks: expect.toSatisfy((n: number) => n > 0),
    completed: expect.toSatisfy((n: number) => n > 0),
  });
}, 120_000);
