/** Counts stop here: the status view must stay cheap however large a backlog grows. */
export const COUNT_CAP = 10_000;

/**
 * Backlogs that should stay near zero, each counted through a partial index and capped, so
 * the query cost is bounded by COUNT_CAP rather than by table size (effect_processes has no
 * such index; it is small, pruned daily, and capped too).
 *
 * Processes: live means not stopped and heartbeating within EFFECT_STALE_AFTER_MS ($2), the
 * same floor recovery uses. An ActorHost registers one process and heartbeats it only while
 * it holds claims, and never stops it, so an idle host's process goes stale by design and is
 * pruned a day later. Counting every unstopped row as live, `npm run dev` reported 51 live
 * processes (one per conversation that had taken a turn) when none had beaten for 35 s. Stale
 * ones are reported apart; recovery decides per effect whether a stale owner matters.
 *
 * Dead recovery callbacks (`effect:<id>:recovery` dead-lettered: the actor never learned of a
 * retirement) are counted apart from other dead letters; the dead index keeps it small.
 */
export const BACKLOG_QUERY = `
with now as (select app_now_ms() as ms)
select
  (select count(*) from (select 1 from effects where status = 'pending' limit $1) s)::int as effects_pending,
  (select count(*) from (select 1 from effects where status = 'processing' limit $1) s)::int as effects_processing,
  (select count(*) from (select 1 from actor_mailbox where state = 'pending' limit $1) s)::int as mailbox_pending,
  (select count(*) from (select 1 from actor_mailbox where state = 'dead'
     and message_key like 'effect:%:recovery' limit $1) s)::int as dead_recovery_callbacks,
  (select count(*) from (select 1 from effect_processes, now where stopped_at_ms is null
     and heartbeat_at_ms >= now.ms - $2::bigint limit $1) s)::int as live_processes,
  (select count(*) from (select 1 from effect_processes, now where stopped_at_ms is null
     and heartbeat_at_ms < now.ms - $2::bigint limit $1) s)::int as stale_processes,
  (select count(*) from (select 1 from channel_typing_reaction
     where cleaned_at is null and abandoned_at is null limit $1) s)::int as typing_pending,
  app_now() as db_now`;
