// DATABASE_URL=… npx tsx bench/probes/tickets-profile.ts [ops per actor]
//
// Issue 18 item 3: where a ticketed write's time goes, beside the bare upsert of
// bench/suites/30-tickets.ts, 32 concurrent actors, one hot message and 32 messages.
// Needs a server with pg_stat_statements preloaded (track = all, so the statements inside
// private.reaction_ticket_call are counted one by one). Per phase it prints: per-call
// CPU of the Postgres backends of the bench database (/proc, same host) and of this Node
// process (client + WebSocket bridge), WAL bytes per call, and the statements
// (top-level and nested) by total execution time, with calls and WAL.
import { readFile } from 'node:fs/promises';
import type { Pool } from '@neondatabase/serverless';
import { applyWithTicket } from '../../workers/reaction-tickets/ticket-call';
import type { Queryable } from '../../workers/reaction-tickets/types';
import { backendCpuTicks, CLK_TCK } from '../lib/backend-cpu';
import { startBenchStack } from '../lib/stack';
import { BARE_UPSERT, desiredAt, issueTickets, seedTicketWorld } from '../lib/ticket-world';

const ACTORS = 32;
const OPS = Number(process.argv[2] ?? 60);
const TX = { budgetMs: 10_000, lockTimeoutMs: 10_000 };

const stack = await startBenchStack();
const pool = stack.neon(ACTORS + 2);
const admin = stack.pg(2) as unknown as Pool;
await admin.query('create extension if not exists pg_stat_statements');
// PROBE_TRACK=none|top|all: pg_stat_statements.track for the bench sessions (CPU A/B runs
// without its per-statement bookkeeping use none).
if (process.env.PROBE_TRACK)
  await admin.query(
    `alter database ${new URL(stack.databaseUrl).pathname.slice(1)} set pg_stat_statements.track = '${process.env.PROBE_TRACK}'`,
  );
// PROBE_SQL=file.sql: applied after the migrations, to try a schema or function variant.
if (process.env.PROBE_SQL) await admin.query(await readFile(process.env.PROBE_SQL, 'utf8'));

const world = await seedTicketWorld(admin, `p_${Date.now().toString(36)}`, ACTORS);
const { actors, hot, spread } = world;

// For `perf report --pid`: PROBE_PIDS=1 prints the backends each sample read.
const ticks = () =>
  backendCpuTicks(
    admin,
    process.env.PROBE_PIDS ? (pids) => console.log(`pids ${pids.join(',')}`) : undefined,
  );

async function measure(label: string, calls: number, run: () => Promise<number>) {
  await admin.query('select pg_stat_statements_reset()');
  const lsn0 = (await admin.query<{ l: string }>('select pg_current_wal_lsn()::text as l')).rows[0]!.l;
  const pg0 = await ticks();
  const node0 = process.cpuUsage();
  const t0 = performance.now();
  const failed = await run();
  const seconds = (performance.now() - t0) / 1000;
  const node = process.cpuUsage(node0);
  const pgTicks = (await ticks()) - pg0;
  // WAL bytes by LSN (the server's, so other databases' writes count too); records per
  // statement are in the table below (pg_stat_wal's counters are flushed by backends lazily).
  const { rows: w } = await admin.query<{ bytes: string }>(
    'select pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text as bytes',
    [lsn0],
  );
  const load = (await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).join(' ');
  console.log(
    `\n## ${label}: ${calls} calls, ${failed} failed, ${Math.round(calls / seconds)} calls/s, load ${load}`,
  );
  console.log(
    `per call: backend CPU ${((pgTicks / CLK_TCK / calls) * 1e6).toFixed(0)} µs, node CPU (client+bridge) ${(
      (node.user + node.system) / calls
    ).toFixed(0)} µs, WAL ${(Number(w[0]!.bytes) / calls).toFixed(0)} B`,
  );
  const { rows } = await admin.query<Record<string, string>>(
    `select toplevel as top, calls, round(total_exec_time::numeric / $1::numeric * 1000, 1) as "µs/call",
            round((total_exec_time / greatest(calls, 1))::numeric * 1000, 1) as "µs/exec",
            round(shared_blks_hit::numeric / $1::numeric, 1) as "hit/call", round(shared_blks_dirtied::numeric / $1::numeric, 2) as "dirtied/call",
            round(wal_bytes / $1::numeric, 0) as "walB/call", round(wal_records::numeric / $1::numeric, 2) as "walrec/call",
            regexp_replace(left(query, 110), '\\s+', ' ', 'g') as query
       from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database())
        and query not ilike '%pg_stat%' and query not ilike '%pg_current_wal%' and query not ilike '%pg_backend_pid%'
      order by total_exec_time desc limit ${Number(process.env.PROBE_TOP ?? 40)}`,
    [calls],
  );
  console.table(rows);
}

async function runActors(fn: (actor: number, i: number) => Promise<unknown>): Promise<number> {
  let failed = 0;
  await Promise.all(
    Array.from({ length: ACTORS }, async (_, a) => {
      for (let i = 0; i < OPS; i++) {
        try {
          await fn(a, i);
        } catch (err) {
          if (failed++ === 0) console.error(err);
        }
      }
    }),
  );
  return failed;
}

try {
  for (const [name, messageOf] of [
    ['one hot message', () => hot],
    ['32 messages', (a: number) => spread[a]!],
  ] as [string, (a: number) => string][]) {
    // PROBE_CASE=hot|spread: only that case.
    if (process.env.PROBE_CASE && !name.startsWith(process.env.PROBE_CASE === 'hot' ? 'one' : '32')) continue;
    await Promise.all(Array.from({ length: ACTORS }, () => pool.query('select 1')));
    await measure(`bare upsert, ${name}`, ACTORS * OPS, () =>
      runActors((a) => pool.query(BARE_UPSERT, [messageOf(a), actors[a]!, '🧱'])),
    );
    const tickets = await issueTickets(pool, world, messageOf, OPS);
    await admin.query('analyze');
    // PROBE_PAUSE_MS: time to attach a profiler (perf record -p) to the pids printed here.
    if (process.env.PROBE_PAUSE_MS) {
      await ticks();
      await new Promise((r) => setTimeout(r, Number(process.env.PROBE_PAUSE_MS)));
    }
    await measure(`ticketed, ${name}`, ACTORS * OPS, () =>
      runActors((a, i) => {
        const { id, operationId } = tickets[a]![i]!;
        return applyWithTicket(pool as unknown as Queryable, TX, { actorId: actors[a]! }, operationId, id, {
          messageId: messageOf(a),
          emoji: '👍',
          desired: desiredAt(i),
        });
      }),
    );
  }
} finally {
  await stack.stop();
}
process.exit(0);
