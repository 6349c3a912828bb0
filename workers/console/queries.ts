import { callsTodaySql } from '../lark/call-counts';

/**
 * The console's own reads (what /admin/status and the typing status route do not already
 * compute: those queries are reused from workers/admin/status.ts and
 * workers/typing-ledger/admin-routes.ts). Counts, times and ids only: never a payload, a
 * snapshot, a secret or a message text. Time from the database (app_now, app_now_ms).
 * Every list has a limit; every trend covers the last 24 hours in hourly buckets
 * (`h` = hours before now, 0..23).
 */

/** Quota slots in use per workspace (the partial quota index, 0041) and the last 24 h's incidents. */
export const TYPING_QUOTA = `
with incidents as (
  select workspace_id,
    count(*) filter (where kind = 'quota_skip')::int as quota_skips_24h,
    count(*) filter (where kind = 'withdraw_failed')::int as withdraw_failed_24h
  from typing_incidents where at > app_now() - interval '24 hours' group by workspace_id),
used as (
  select workspace_id, count(*)::int as quota_used from channel_typing_reaction
  where quota_slot is not null group by workspace_id)
select coalesce(u.workspace_id, i.workspace_id) as workspace_id, coalesce(u.quota_used, 0) as quota_used,
  coalesce(i.quota_skips_24h, 0) as quota_skips_24h, coalesce(i.withdraw_failed_24h, 0) as withdraw_failed_24h
from used u full join incidents i on i.workspace_id = u.workspace_id
order by 1 limit 200`;

/** The last maintenance runs (typing_maintenance_runs, written by the TypingMaintenance object). */
export const MAINTENANCE_RUNS = `
select at, duration_ms, budget_ms, stopped, expired, pruned, claimed, cleaned, deferred, failed_steps
from typing_maintenance_runs order by at desc limit 30`;

/** Effects by state, each capped like the status backlog ($1 = cap). */
export const EFFECTS_BY_STATE = `
select s.status, (select count(*) from (select 1 from effects e where e.status = s.status limit $1) c)::int as n
from unnest(array['pending', 'processing', 'completed', 'dead']) as s(status)`;

/** Unstopped processes, newest heartbeat first; live = inside the liveness floor ($1 ms). */
export const PROCESSES = `
select id::text as id, role, protocol_version, heartbeat_at_ms::float8 as heartbeat_at_ms,
  started_at_ms::float8 as started_at_ms, heartbeat_at_ms >= app_now_ms() - $1::bigint as live
from effect_processes where stopped_at_ms is null
order by heartbeat_at_ms desc limit 20`;

/** Processing effects whose owner is missing, stopped or silent past the floor ($1 ms). */
export const STALE_OWNERS = `
select count(*)::int as n from (
  select 1 from effects e left join effect_processes p on p.id = e.locked_by
  where e.status = 'processing'
    and (p.id is null or p.stopped_at_ms is not null or p.heartbeat_at_ms < app_now_ms() - $1::bigint)
  limit 10000) s`;

/** Dead-lettered mailbox messages and retirements per hour, last 24 h. */
export const EFFECT_TRENDS = `
with now as (select app_now_ms() as ms)
select 'dead' as kind, floor((now.ms - dead_at_ms) / 3600000)::int as h, count(*)::int as n
  from actor_mailbox, now where state = 'dead' and dead_at_ms > now.ms - 86400000 group by 2
union all
select 'retired', floor((now.ms - retired_at_ms) / 3600000)::int, count(*)::int
  from effect_recoveries, now where retired_at_ms > now.ms - 86400000 group by 2`;

/**
 * The newest dead-lettered messages (their key, attempts and error text; never the payload),
 * recovery callbacks first and marked: each is an actor that never learned of a retirement.
 */
export const DEAD_LETTERS = `
select m.id::text as id, i.actor_type, m.message_key, m.attempts, left(m.last_error, 160) as last_error,
  m.dead_at_ms::float8 as dead_at_ms, m.message_key like 'effect:%:recovery' as recovery_callback
from actor_mailbox m join actor_instances i on i.id = m.instance_id
where m.state = 'dead' order by m.message_key like 'effect:%:recovery' desc, m.dead_at_ms desc limit 20`;

/**
 * Installations with their last webhook event (receipts: 24 h), last Open API error, the
 * routes a recorded Lark 429 reset holds now (lark/rate-limits.ts: nothing is sent on them
 * until `until`; primary-key prefix reads), their settings row (null: every default; read
 * through installations/settings.ts) and the app's Lark calls today (lark/call-counts.ts).
 */
export const INSTALLATIONS = `
select i.id, i.workspace_id, i.app_id, i.api_base,
  (select to_jsonb(s) from lark_installation_settings s where s.installation_id = i.id) as settings_row,
  ${callsTodaySql(`rtrim(i.api_base, '/')`, 'i.app_id')}::float8 as calls_today,
  (select max(r.received_at) from lark_event_receipts r where r.installation_id = i.id) as last_event_at,
  (select json_agg(json_build_object('route', l.route, 'until', l.not_before) order by l.route)
     from lark_rate_limits l
    where l.api_base = rtrim(i.api_base, '/') and l.app_id = i.app_id and l.not_before > app_now()) as holds,
  e.route as error_route, e.code as error_code, e.http_status as error_http_status, e.at as error_at
from lark_installations i
left join lark_api_errors e on e.app_id = i.app_id and e.api_base = rtrim(i.api_base, '/')
order by i.workspace_id, i.id limit 100`;

/** Mobile tickets: outstanding (as tickets.ts counts it) in total and for the fullest actors. */
export const TICKETS_OUTSTANDING = `
with live as (
  select t.actor_id from private.reaction_tickets t
  where t.expires_at > app_now()
    and not exists (select 1 from private.chat_reaction_operations o
                    where o.actor_id = t.actor_id and o.operation_id = t.operation_id)
    and not exists (select 1 from private.chat_retired_reaction_operations f
                    where f.actor_id = t.actor_id and f.operation_id = t.operation_id)
  limit 10000)
select actor_id, count(*)::int as n from live group by actor_id order by n desc, actor_id limit 5`;

/** Tickets issued, expired, and terminal answers (operation receipts) per hour, last 24 h. */
export const TICKET_TRENDS = `
select 'issued' as kind, floor(extract(epoch from app_now() - created_at) / 3600)::int as h, count(*)::int as n
  from private.reaction_tickets where created_at > app_now() - interval '24 hours' group by 2
union all
select 'expired', floor(extract(epoch from app_now() - expires_at) / 3600)::int, count(*)::int
  from private.reaction_tickets
  where expires_at > app_now() - interval '24 hours' and expires_at <= app_now() group by 2
union all
select 'answered', floor(extract(epoch from app_now() - created_at) / 3600)::int, count(*)::int
  from private.chat_reaction_operations
  where contract = 'ticket' and created_at > app_now() - interval '24 hours' group by 2`;

/** The latest console actions. */
export const AUDIT = `
select at, operator, action, target, outcome from console_audit order by at desc, id desc limit 15`;
