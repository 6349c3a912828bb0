import type { Pool } from '@neondatabase/serverless';
import { uuidv7Sql } from '../../scripts/lib/effect-ids';
import { withTx } from '../../workers/db/tx';
import { commitActor } from '../../workers/effects/commit';
import { EffectStage } from '../../workers/effects/emit';
import { ensureInstance } from '../../workers/effects/mailbox';
import { registerProcess } from '../../workers/effects/processes';
import { processRecoveryChecks, runRecoveryPass } from '../../workers/effects/recovery';
import { EffectRegistry } from '../../workers/effects/registry';
import { runEffectsUntilShort } from '../../workers/effects/runner';
import { claimEffects, completeEffects } from '../../workers/effects/scheduler';
import { effectConfig } from '../../workers/effects/types';
import { drainGraphile, installGraphile, stageGraphileJobs } from '../lib/graphile';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';

const N = Number(process.env.BENCH_EFFECTS_N ?? 20_000);
const BATCH = Number(process.env.BENCH_EFFECTS_BATCH ?? 100);
const BIG = Number(process.env.BENCH_EFFECTS_BIG ?? 1_000_000);
const INSTANCES = 200;
const RECOVERY_ROUNDS = Number(process.env.BENCH_RECOVERY_ROUNDS ?? 5);
/** BENCH_EFFECTS_RECOVERY_ONLY=1: only the recovery pass rows (skips drains and graphile-worker). */
const RECOVERY_ONLY = process.env.BENCH_EFFECTS_RECOVERY_ONLY === '1';
const config = effectConfig({ staleAfterMs: 30_000, claimScanLimit: 100 });

/** Stages `n` effects (with recovery bindings) spread over the bench instances, by SQL. */
async function preload(pool: Pool, n: number, status: 'pending' | 'completed') {
  await pool.query(
    `insert into effects (id, origin_instance_id, kind, args, status, finished_at_ms)
     select ${uuidv7Sql('app_now_ms() + g')}, 'bench:' || (g % ${INSTANCES}), 'noop', '{}'::jsonb, $2,
            case when $2 = 'completed' then app_now_ms() end
       from generate_series(1, $1) g`,
    [n, status],
  );
}

async function bindAll(pool: Pool) {
  await pool.query(
    `insert into effect_recoveries (effect_id, origin_instance_id, recovery_operation, expires_at_ms)
     select id, origin_instance_id, 'replace', app_now_ms() + 86400000 from effects
     on conflict do nothing`,
  );
}

/** The runtime's own drain loop (a noop executor), as an ActorHost runs it, over the shared queue. */
const noopRegistry = new EffectRegistry().registerEffect({ kind: 'noop', run: async () => null });

/**
 * `workers` loops of the runtime's drain (`runEffectsUntilShort`: claim(batch) → no-op →
 * complete(batch), a full batch's completion claiming the next in its statement) until nothing
 * is left.
 */
async function drain(pools: Pool[], workers: number): Promise<{ done: number; ms: number }> {
  const ids = await Promise.all(
    Array.from({ length: workers }, (_, i) => registerProcess(pools[i]!, 'bench')),
  );
  let done = 0;
  const started = performance.now();
  await Promise.all(
    ids.map(async (pid, i) => {
      // A short batch (another worker took the rest of it) ends one run; nothing claimed, the drain.
      for (;;) {
        const r = await runEffectsUntilShort(pools[i]!, noopRegistry, pid, {
          limit: BATCH,
          beforeClaim: async () => undefined,
        });
        done += r.completed;
        if (r.claimed === 0) return;
      }
    }),
  );
  return { done, ms: performance.now() - started };
}

async function graphileDrain(stack: BenchStack, concurrency: number, localQueue: boolean) {
  await stageGraphileJobs(stack.pg(2), N);
  return drainGraphile(stack.pg(concurrency + 2), {
    n: N,
    concurrency,
    localQueue: localQueue ? BATCH : null,
  });
}

async function latencies(pool: Pool, n: number) {
  const inst = await ensureInstance(pool, 'bench-lat', 'one');
  const pid = await registerProcess(pool, 'bench-lat');
  const emitMs: number[] = [];
  const claimMs: number[] = [];
  let revision = 0;
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const stage = new EffectStage(inst);
    stage.emit('noop', { i }, { recovery: { operation: 'replace' } });
    await withTx(pool, { budgetMs: 5000 }, (tx) =>
      commitActor(
        tx,
        { instanceId: inst, expectedRevision: revision, state: { i }, effects: stage.staged },
        config,
      ),
    );
    revision++;
    const t1 = performance.now();
    // The host is woken after the commit; its first step is this claim.
    const claimed = await claimEffects(pool, pid, { limit: 10, instanceId: inst });
    const t2 = performance.now();
    await completeEffects(
      pool,
      pid,
      claimed.map((e) => ({ id: e.id, result: null })),
    );
    emitMs.push(t1 - t0);
    claimMs.push(t2 - t1);
  }
  return { emitMs, claimMs };
}

/** Stale processing effects owned by a dead process, for the recovery pass to find. */
async function staleClaims(pool: Pool, n: number) {
  const dead = await registerProcess(pool, 'bench-dead');
  await pool.query(
    `update effects set status = 'processing', locked_by = $1, locked_at_ms = app_now_ms(), finished_at_ms = null
      where id in (select e.id from effects e where e.status = 'completed'
                     and not exists (select 1 from effect_recoveries r
                                      where r.effect_id = e.id and r.retired_at_ms is not null) limit $2)`,
    [dead, n],
  );
  await pool.query(
    `insert into effect_recoveries (effect_id, origin_instance_id, recovery_operation, expires_at_ms)
     select id, origin_instance_id, 'replace', app_now_ms() + 86400000 from effects where locked_by = $1
     on conflict do nothing`,
    [dead],
  );
  await pool.query('update effect_processes set heartbeat_at_ms = app_now_ms() - 60000 where id = $1', [
    dead,
  ]);
}

/** True when a plan (explain json) has a sequential scan of `effects` anywhere in its tree. */
function scansEffects(node: unknown): boolean {
  if (Array.isArray(node)) return node.some(scansEffects);
  if (node === null || typeof node !== 'object') return false;
  const n = node as Record<string, unknown>;
  if (n['Node Type'] === 'Seq Scan' && n['Relation Name'] === 'effects') return true;
  return Object.values(n).some(scansEffects);
}

/**
 * A TCP pool whose clients count the statements they send: one round trip each (`begin` with
 * its `set local`s is one multi-statement query). Counts only clients it connects itself.
 */
function countedPool(stack: BenchStack): { pool: Pool; statements(): number } {
  const pool = stack.pg(2);
  let n = 0;
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...a: unknown[]) => unknown;
    (client as unknown as { query: typeof query }).query = (...a: unknown[]) => {
      n++;
      return query(...a);
    };
  });
  return { pool: pool as unknown as Pool, statements: () => n };
}

/** 100 stale opted-in effects of one instance, one open explicit check on each. */
async function staleChecks(pool: Pool, instanceId: string, n: number) {
  const dead = await registerProcess(pool, 'bench-dead-batch');
  await pool.query(
    `insert into effects (id, origin_instance_id, kind, args, status, locked_by, locked_at_ms)
     select ${uuidv7Sql('app_now_ms() + g')}, $1, 'noop', '{}'::jsonb, 'processing', $2, app_now_ms() from generate_series(1, $3) g`,
    [instanceId, dead, n],
  );
  await pool.query(
    `insert into effect_recoveries (effect_id, origin_instance_id, recovery_operation, expires_at_ms)
     select id, origin_instance_id, 'replace', app_now_ms() + 86400000 from effects where locked_by = $1`,
    [dead],
  );
  await pool.query(
    `insert into effect_recovery_checks (effect_id, origin_instance_id)
     select id, origin_instance_id from effects where locked_by = $1 order by id`,
    [dead],
  );
  await pool.query('update effect_processes set heartbeat_at_ms = app_now_ms() - 60000 where id = $1', [
    dead,
  ]);
}

async function passTime(stack: BenchStack, setup: Pool, label: string, rows: BenchRow[]) {
  const { rows: c } = await setup.query<{ n: string }>('select count(*) as n from effects');
  const plan = await setup.query<{ 'QUERY PLAN': unknown }>(
    `explain (format json) select e.id from effects e
       left join effect_processes p on p.id = e.locked_by
       left join effect_recoveries r on r.effect_id = e.id
      where e.status = 'processing'
        and (p.id is null or p.heartbeat_at_ms < app_now_ms() - greatest(30000, coalesce(r.timeout_ms, 0)))
      order by e.id limit 100`,
  );
  const seqScan = scansEffects(plan.rows[0]!['QUERY PLAN']);
  const { pool, statements } = countedPool(stack);
  const t0 = performance.now();
  const empty = await runRecoveryPass(pool, config);
  const emptyMs = performance.now() - t0;
  // Several passes, median: one pass of 100 on a shared 2-core box varies by ±50%.
  const passMs: number[] = [];
  let retired = empty.retired;
  let perCandidate = 0;
  for (let i = 0; i < RECOVERY_ROUNDS; i++) {
    await staleClaims(setup, 100);
    const before = statements();
    const t1 = performance.now();
    const report = await runRecoveryPass(pool, config);
    passMs.push(performance.now() - t1);
    retired += report.retired;
    perCandidate = (statements() - before) / Math.max(1, report.candidates);
  }
  rows.push({
    suite: 'effects',
    case: `recovery pass, ${label} effects in table`,
    n: Number(c[0]!.n),
    'no candidates ms': round(emptyMs, 1),
    'retire 100 ms': `${round(percentile(passMs, 50), 1)} (p50 of ${RECOVERY_ROUNDS})`,
    'statements each': round(perCandidate, 1),
    retired,
    'seq scan of effects': seqScan ? 'YES' : 'no',
  });
  // The explicit batch: every open check of one instance decided in one transaction.
  const batchMs: number[] = [];
  let batchStatements = 0;
  let answered = 0;
  for (let i = 0; i < RECOVERY_ROUNDS; i++) {
    await staleChecks(setup, 'bench:0', 100);
    const before = statements();
    const t2 = performance.now();
    const outcomes = await processRecoveryChecks(pool, 'bench:0', config);
    batchMs.push(performance.now() - t2);
    batchStatements = statements() - before;
    answered += [...outcomes.values()].filter((o) => o.outcome === 'retired').length;
  }
  rows.push({
    suite: 'effects',
    case: `explicit check batch, 100 stale effects of one instance, ${label} effects in table`,
    n: Number(c[0]!.n),
    'retire 100 ms': `${round(percentile(batchMs, 50), 1)} (p50 of ${RECOVERY_ROUNDS})`,
    'statements each': batchStatements,
    retired: answered,
  });
}

/** Emit and claim latency, drains, and the graphile-worker yardstick. */
async function throughput(stack: BenchStack, setup: Pool, rows: BenchRow[]) {
  const lat = await latencies(stack.neon(2), 500);
  for (const [name, s] of [
    ['emit-to-commit (fenced commit, 1 effect + binding)', lat.emitMs],
    ['commit-to-claim (claim after wake)', lat.claimMs],
  ] as const)
    rows.push({
      suite: 'effects',
      case: `${name}, neon driver`,
      n: s.length,
      'p50 ms': round(percentile(s, 50), 3),
      'p99 ms': round(percentile(s, 99), 3),
    });

  const ours: Record<number, number> = {};
  for (const workers of [1, 4]) {
    await preload(setup, N, 'pending');
    await bindAll(setup);
    await setup.query('analyze');
    // One TCP pool per worker, like graphile-worker's pg pool: the same transport for both.
    const pools = Array.from({ length: workers }, () => stack.pg(2) as unknown as Pool);
    const r = await drain(pools, workers);
    ours[workers] = (r.done / r.ms) * 1000;
    rows.push({
      suite: 'effects',
      case: `drain ${N} effects, ${workers} worker(s), batch ${BATCH}, tcp`,
      n: r.done,
      'ops/s': Math.round(ours[workers]!),
    });
  }
  const neonPools = Array.from({ length: 4 }, () => stack.neon(2));
  await preload(setup, N, 'pending');
  await bindAll(setup);
  await setup.query('analyze');
  const rn = await drain(neonPools, 4);
  rows.push({
    suite: 'effects',
    case: `drain ${N} effects, 4 workers, batch ${BATCH}, neon driver`,
    n: rn.done,
    'ops/s': Math.round((rn.done / rn.ms) * 1000),
  });

  await installGraphile(stack.databaseUrl);
  for (const workers of [1, 4]) {
    for (const lq of [false, true]) {
      const g = await graphileDrain(stack, workers, lq);
      const rate = (g.done / g.ms) * 1000;
      rows.push({
        suite: 'effects',
        case: `graphile-worker 0.17.3, ${N} no-op jobs, concurrency ${workers}${lq ? `, localQueue ${BATCH}` : ''}`,
        n: g.done,
        'ops/s': Math.round(rate),
        ratio: `ours/gw ${round(ours[workers]! / rate, 2)}`,
      });
    }
  }
}

export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const setup = stack.pg(4) as unknown as Pool;
  await setup.query(
    `insert into actor_instances (id, actor_type, actor_key)
     select 'bench:' || g, 'bench', g::text from generate_series(0, ${INSTANCES - 1}) g`,
  );

  if (!RECOVERY_ONLY) await throughput(stack, setup, rows);

  // Recovery pass at 10k and at BIG effects in the table (terminal rows loaded by SQL).
  await setup.query('delete from effects');
  await preload(setup, 10_000, 'completed');
  await bindAll(setup);
  await setup.query('analyze effects');
  await passTime(stack, setup, '10k', rows);
  // The big load skips bindings (staleClaims binds what it makes stale): ~1 min for 1M rows here.
  const loadStart = performance.now();
  await preload(setup, BIG - 10_000, 'completed');
  console.error(`loaded ${BIG - 10_000} effects in ${Math.round(performance.now() - loadStart)} ms`);
  await setup.query('analyze effects');
  await passTime(stack, setup, `${BIG / 1000}k`, rows);
  return rows;
}
