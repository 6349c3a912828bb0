// DATABASE_URL=… BENCH_DB_PREFIX=… npx tsx bench/probes/effects-drain-profile.ts [n] [workers]
//
// Issue 18 item 4: where one drain batch's time goes. Drains `n` bound effects with
// `workers` TCP loops, timing the claim and the completion statements separately (sum of
// client-observed ms per statement kind), then prints explain (analyze, buffers) of one claim
// and one completion of 100.
import type { Pool } from '@neondatabase/serverless';
import { uuidv7Sql } from '../../scripts/lib/effect-ids';
import { registerProcess } from '../../workers/effects/processes';
import { claimEffects, completeEffects } from '../../workers/effects/scheduler';
import { startBenchStack } from '../lib/stack';

const n = Number(process.argv[2] ?? 20_000);
const workers = Number(process.argv[3] ?? 1);
const stack = await startBenchStack();
try {
  const setup = stack.pg(2) as unknown as Pool;
  await setup.query(
    `insert into actor_instances (id, actor_type, actor_key)
     select 'bench:' || g, 'bench', g::text from generate_series(0, 199) g`,
  );
  const load = async (k: number) => {
    await setup.query(
      `insert into effects (id, origin_instance_id, kind, args)
       select ${uuidv7Sql('app_now_ms() + g')}, 'bench:' || (g % 200), 'noop', '{}'::jsonb from generate_series(1, $1) g`,
      [k],
    );
    await setup.query(
      `insert into effect_recoveries (effect_id, origin_instance_id, recovery_operation, expires_at_ms)
       select id, origin_instance_id, 'replace', app_now_ms() + 86400000 from effects on conflict do nothing`,
    );
    await setup.query('analyze');
  };
  await load(n);
  const pools = Array.from({ length: workers }, () => stack.pg(2) as unknown as Pool);
  const t = { claim: 0, complete: 0, batches: 0 };
  const started = performance.now();
  await Promise.all(
    pools.map(async (pool) => {
      const pid = await registerProcess(pool, 'probe');
      for (;;) {
        let s = performance.now();
        const claimed = await claimEffects(pool, pid, { limit: 100 });
        t.claim += performance.now() - s;
        if (claimed.length === 0) return;
        s = performance.now();
        await completeEffects(
          pool,
          pid,
          claimed.map((e) => ({ id: e.id, result: null })),
        );
        t.complete += performance.now() - s;
        t.batches++;
      }
    }),
  );
  const ms = performance.now() - started;
  console.log(
    `${n} effects, ${workers} workers: ${Math.round((n / ms) * 1000)}/s; per batch claim ${(t.claim / t.batches).toFixed(2)} ms, complete ${(t.complete / t.batches).toFixed(2)} ms`,
  );
  await load(1000);
  const pool = pools[0]!;
  const pid = await registerProcess(pool, 'probe');
  const { rows: plan } = await pool.query(
    `explain (analyze, buffers, wal) with alive as (
       update effect_processes set heartbeat_at_ms = app_now_ms() where id = $1 and stopped_at_ms is null returning id),
     picked as (
       select id from effects where status = 'pending' and run_at_ms <= (select app_now_ms())
        order by run_at_ms, id limit 100 for update skip locked)
     update effects e set status = 'processing', locked_by = $1, locked_at_ms = (select app_now_ms()), attempts = e.attempts + 1
      where e.id = any(array(select id from picked)) and exists (select 1 from alive)`,
    [pid],
  );
  console.log(plan.map((r) => r['QUERY PLAN']).join('\n'));
  await pool.query("load 'auto_explain'").catch(() => undefined);
  const claimed = await claimEffects(pool, pid, { limit: 100 });
  const c = await pool.connect();
  await c
    .query(
      'set auto_explain.log_min_duration = 0; set auto_explain.log_analyze = on; set auto_explain.log_nested_statements = on; set client_min_messages = log; set auto_explain.log_buffers = on; set auto_explain.log_wal = on',
    )
    .catch((e: Error) => console.log('auto_explain unavailable', e.message));
  c.on('notice', (m: { message?: string }) => console.log(m.message));
  const s = performance.now();
  await c.query('select * from effects_complete($1, $2, $3, 5000)', [
    pid,
    claimed.map((e) => e.id),
    claimed.map(() => 'null'),
  ]);
  console.log(`complete of 100 on one connection: ${(performance.now() - s).toFixed(2)} ms`);
  c.release();
} finally {
  await stack.stop();
}
process.exit(0);
