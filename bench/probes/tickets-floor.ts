// npx tsx bench/probes/tickets-floor.ts [ops per actor] [rounds]
//
// Issue 18 item 3: how close to a bare upsert can a write that keeps the ticket contract's
// steps get on this machine? 32 concurrent actors, one hot message and 32 messages, through
// the Neon driver and the bridge like bench/suites/30-tickets.ts. Per round, side by side:
//   bare     the bare upsert of the suite;
//   ticketed private.reaction_ticket_call, the production write;
//   floor    the contract's steps and nothing else: operation lock, ticket + receipt read with
//            fresh time, retirement lock, fence read with fresh time, message row lock, fresh
//            time, the mutation, the version bump, a receipt and the answer's state, on
//            receipt and fence tables with a primary key only (no admission, no lock budgets,
//            no foreign keys, CHECKs or other indexes);
//   floor, no rows  the floor answering with the version only (what the message's rows cost);
//   locks    only the three locks in order, the mutation and the bump (no reads, no receipt).
// Every phase prints calls/s, its ratio to the bare upsert of the same round, and CPU per call
// of the bench database's backends and of this Node process (client and bridge).
import { readFile } from 'node:fs/promises';
import type { Pool } from '@neondatabase/serverless';
import { applyWithTicket } from '../../workers/reaction-tickets/ticket-call';
import type { Queryable } from '../../workers/reaction-tickets/types';
import { backendCpuTicks, CLK_TCK } from '../lib/backend-cpu';
import { startBenchStack } from '../lib/stack';
import { BARE_UPSERT, desiredAt, issueTickets, seedTicketWorld } from '../lib/ticket-world';

const ACTORS = 32;
const OPS = Number(process.argv[2] ?? 200);
const ROUNDS = Number(process.argv[3] ?? 3);
const TX = { budgetMs: 10_000, lockTimeoutMs: 10_000 };

const FLOOR_SQL = `
create schema probe_floor;
create table probe_floor.receipts (
  actor_id text, operation_id text, message_id text, emoji text, desired text, outcome text,
  reaction_version bigint, ticket_id uuid, ticket_expires_at timestamptz,
  created_at timestamptz not null default app_now(), primary key (actor_id, operation_id));
create table probe_floor.fences (actor_id text, operation_id text, primary key (actor_id, operation_id));
create function probe_floor.call(p_actor text, p_operation text, p_ticket uuid, p_rows boolean) returns json
language plpgsql as $$
declare t record; ignored text; fenced boolean; now_ timestamptz; v bigint; changed int; answer json;
begin
  ignored := pg_advisory_xact_lock(730101, hashtext(p_actor || '/' || p_operation))::text;
  select tk.*, app_now() as now_,
         (select row_to_json(o) from probe_floor.receipts o
           where o.actor_id = p_actor and o.operation_id = p_operation) as prior
    into t from private.reaction_tickets tk where tk.id = p_ticket;
  if t.now_ >= t.expires_at or t.prior is not null then raise exception 'unexpected'; end if;
  ignored := pg_advisory_xact_lock(730102, hashtext(p_actor || '/' || p_operation))::text;
  select exists (select 1 from probe_floor.fences f where f.actor_id = p_actor and f.operation_id = p_operation),
         app_now() into fenced, now_;
  if fenced or now_ >= t.expires_at then raise exception 'unexpected'; end if;
  select m.reaction_version into v from private.messages m where m.id = t.message_id for update;
  if app_now() >= t.expires_at then raise exception 'unexpected'; end if;
  if t.desired = 'present' then
    insert into private.message_reactions (message_id, actor_id, emoji)
    values (t.message_id, t.actor_id, t.emoji) on conflict do nothing;
  else
    delete from private.message_reactions
     where message_id = t.message_id and actor_id = t.actor_id and emoji = t.emoji;
  end if;
  get diagnostics changed = row_count;
  with bumped as (
    update private.messages set reaction_version = reaction_version + 1, updated_at = app_now()
     where id = t.message_id and changed > 0 returning reaction_version
  ), receipt as (
    insert into probe_floor.receipts (actor_id, operation_id, message_id, emoji, desired, outcome,
      reaction_version, ticket_id, ticket_expires_at)
    select t.actor_id, t.operation_id, t.message_id, t.emoji, t.desired,
           case when changed = 0 then 'unchanged' when t.desired = 'present' then 'added' else 'removed' end,
           coalesce((select reaction_version from bumped), v), t.id, t.expires_at
    returning *
  )
  select json_build_object('receipt', (select row_to_json(receipt) from receipt),
    'message', json_build_object('message_id', t.message_id,
      'reaction_version', coalesce((select reaction_version from bumped), v),
      'rows', case when p_rows then coalesce((select json_agg(json_build_object('emoji', r.emoji, 'actor_id', r.actor_id)
                                        order by r.emoji, r.actor_id)
                        from private.message_reactions r where r.message_id = t.message_id), '[]') end))
    into answer;
  return answer;
end $$;
create function probe_floor.locks(p_actor text, p_operation text, p_message text, p_desired text) returns bigint
language plpgsql as $$
declare ignored text; v bigint;
begin
  ignored := pg_advisory_xact_lock(730101, hashtext(p_actor || '/' || p_operation))::text;
  ignored := pg_advisory_xact_lock(730102, hashtext(p_actor || '/' || p_operation))::text;
  select m.reaction_version into v from private.messages m where m.id = p_message for update;
  if p_desired = 'present' then
    insert into private.message_reactions (message_id, actor_id, emoji)
    values (p_message, p_actor, '🔒') on conflict do nothing;
  else
    delete from private.message_reactions where message_id = p_message and actor_id = p_actor and emoji = '🔒';
  end if;
  update private.messages set reaction_version = reaction_version + 1 where id = p_message returning reaction_version into v;
  return v;
end $$;`;

const stack = await startBenchStack();
const pool = stack.neon(ACTORS + 2);
const admin = stack.pg(2) as unknown as Pool;
await admin.query(FLOOR_SQL);
// PROBE_SQL=file.sql: applied after the migrations, to try a variant of the production write.
if (process.env.PROBE_SQL) await admin.query(await readFile(process.env.PROBE_SQL, 'utf8'));

const world = await seedTicketWorld(admin, `f_${Date.now().toString(36)}`, ACTORS);
const { actors, hot, spread } = world;

async function runActors(fn: (actor: number, i: number) => Promise<unknown>) {
  let failed = 0;
  const pg0 = await backendCpuTicks(admin);
  const node0 = process.cpuUsage();
  const t0 = performance.now();
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
  const calls = ACTORS * OPS;
  const rate = calls / ((performance.now() - t0) / 1000);
  const node = process.cpuUsage(node0);
  const pgTicks = (await backendCpuTicks(admin)) - pg0;
  return {
    rate,
    failed,
    backendUs: (pgTicks / CLK_TCK / calls) * 1e6,
    nodeUs: (node.user + node.system) / calls,
  };
}

const table: Record<string, string | number>[] = [];
try {
  for (const [name, messageOf] of [
    ['hot', () => hot],
    ['32 messages', (a: number) => spread[a]!],
  ] as [string, (a: number) => string][]) {
    await Promise.all(Array.from({ length: ACTORS }, () => pool.query('select 1')));
    for (let round = 1; round <= ROUNDS; round++) {
      const tickets = await issueTickets(pool, world, messageOf, OPS);
      await admin.query('analyze');
      const row = async (phase: string, r: Awaited<ReturnType<typeof runActors>>, bare?: number) => {
        const load = (await readFile('/proc/loadavg', 'utf8')).split(' ')[0]!;
        table.push({
          case: name,
          round,
          phase,
          'calls/s': Math.round(r.rate),
          ratio: bare ? Number((r.rate / bare).toFixed(2)) : '',
          'backend µs': Math.round(r.backendUs),
          'node µs': Math.round(r.nodeUs),
          failed: r.failed,
          load,
        });
      };
      const bare = await runActors((a) => pool.query(BARE_UPSERT, [messageOf(a), actors[a]!, '🧱']));
      await row('bare', bare);
      const mine = await runActors((a, i) => {
        const { id, operationId } = tickets[a]![i]!;
        return applyWithTicket(pool as unknown as Queryable, TX, { actorId: actors[a]! }, operationId, id, {
          messageId: messageOf(a),
          emoji: '👍',
          desired: desiredAt(i),
        });
      });
      await row('ticketed', mine, bare.rate);
      const floor = await runActors((a, i) => {
        const { id, operationId } = tickets[a]![i]!;
        return pool.query('select probe_floor.call($1, $2, $3, true)', [actors[a]!, operationId, id]);
      });
      await row('floor', floor, bare.rate);
      // The same floor on a second set of tickets, answering without the message's rows.
      await admin.query('truncate probe_floor.receipts');
      const noRows = await runActors((a, i) => {
        const { id, operationId } = tickets[a]![i]!;
        return pool.query('select probe_floor.call($1, $2, $3, false)', [actors[a]!, operationId, id]);
      });
      await row('floor, no rows', noRows, bare.rate);
      const locks = await runActors((a, i) =>
        pool.query('select probe_floor.locks($1, $2, $3, $4)', [
          actors[a]!,
          tickets[a]![i]!.operationId,
          messageOf(a),
          desiredAt(i),
        ]),
      );
      await row('locks', locks, bare.rate);
    }
  }
} finally {
  await stack.stop();
}
console.table(table);
process.exit(0);
