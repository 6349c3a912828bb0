-- Repeatable (scripts/lib/migrator.ts, docs/operations.md "Migrations"): re-applied in one
-- transaction whenever this text changes; only `create or replace`. History: migration 0111.
set local lock_timeout = '5s';
set local statement_timeout = '30s';

-- Effect write-backs (completion and failure of a claimed batch) in one round trip (issue 18
-- item 4). workers/effects/scheduler.ts ran each as begin, the instance locks, the effect
-- write-back, one mailbox insert per notified instance, commit: 4+ round trips per batch of
-- 100, and every lock taken was held across the client round trips that followed. Each is now
-- one call, an autocommit statement, with the same steps in the same order:
--
-- 1. the origin instances of the batch, `for share`, ordered by id, in their own statement,
--    so every instance lock is held before the first effect lock whatever plan the effect
--    statement gets (spec: completion/failure lock the instance before the effect);
-- 2. the effects, `for update` in id order; `live` is evaluated on the row version locked
--    (read committed re-reads a row changed while it waited: a claim retired, requeued or
--    taken over meanwhile is not live); only live rows are written (steps 1 and 2 are
--    effects_lock_batch, shared by both write-backs);
-- 3. in the statement that writes them, the runtime's callback messages (`effect:<id>:completed` for
--    live effects with notify_on_complete, `effect:<id>:failed` for the ones this failure
--    made dead), in effect id order, which is each instance's delivery order, as before.
--
-- Budget: statement_timeout set inside a statement does not arm for it, so lock waits are
-- bounded by lock_timeout = p_budget_ms (the pool's statement_timeout stays the outer
-- ceiling). Returns the locked rows, as the TypeScript split them before.

-- Step 1 of both write-backs, its own statement: the lock budget, then every origin instance
-- of the batch `for share`, ordered by id. plpgsql: PERFORM runs the query to the end, so
-- every origin is locked (a SQL function would stop at its first row).
create or replace function effects_lock_origins(p_ids uuid[], p_budget_ms int) returns void
language plpgsql as $$
begin
  perform set_config('lock_timeout', greatest(1, p_budget_ms)::text || 'ms', true);
  perform 1 from actor_instances i
    where i.id in (select e.origin_instance_id from effects e where e.id = any(p_ids))
    order by i.id for share;
end
$$;

-- Steps 1 and 2 of both write-backs: the origin instances (above), then the batch's effects
-- `for update` in id order with `live` read on the version locked. A volatile function, so it
-- runs as statements of its own after the instance locks; the caller's write statement joins
-- the rows it returns (its UPDATE of a row this transaction holds re-reads the latest version).
create or replace function effects_lock_batch(p_process bigint, p_ids uuid[], p_budget_ms int)
returns table (id uuid, origin_instance_id text, notify_on_complete boolean, attempts int,
               max_attempts int, live boolean)
language plpgsql as $$
#variable_conflict use_column
begin
  perform effects_lock_origins(p_ids, p_budget_ms);
  return query
    select e.id, e.origin_instance_id, e.notify_on_complete, e.attempts, e.max_attempts,
           (e.status = 'processing' and e.locked_by = p_process) as live
      from effects e
     where e.id = any(p_ids)
     order by e.id for update;
end
$$;

create or replace function effects_complete(p_process bigint, p_ids uuid[], p_results text[], p_budget_ms int)
returns table (id uuid, origin_instance_id text, notify_on_complete boolean, attempts int,
               max_attempts int, live boolean)
language plpgsql as $$
#variable_conflict use_column
begin
  return query
  with locked as (select * from effects_lock_batch(p_process, p_ids, p_budget_ms)),
  input as (select * from unnest(p_ids, p_results) as r(id, result)),
  done as (
    update effects e set status = 'completed', result = r.result::jsonb, locked_by = null,
           locked_at_ms = null, finished_at_ms = (select app_now_ms())
      from locked l, input r
     where l.live and r.id = l.id and e.id = l.id),
  mail as (
    insert into actor_mailbox (instance_id, message_key, payload)
    select l.origin_instance_id, 'effect:' || l.id || ':completed',
           jsonb_build_object('effectId', l.id, 'result', r.result::jsonb)
      from locked l join input r on r.id = l.id
     where l.live and l.notify_on_complete
     order by l.id)
  select l.id, l.origin_instance_id, l.notify_on_complete, l.attempts, l.max_attempts, l.live
    from locked l order by l.id;
end
$$;

create or replace function effects_fail(p_process bigint, p_ids uuid[], p_errors text[], p_budget_ms int)
returns table (id uuid, origin_instance_id text, notify_on_complete boolean, attempts int,
               max_attempts int, live boolean)
language plpgsql as $$
#variable_conflict use_column
begin
  return query
  with locked as (select * from effects_lock_batch(p_process, p_ids, p_budget_ms)),
  clock as (select app_now_ms() as ms),
  input as (select * from unnest(p_ids, p_errors) as f(id, error)),
  done as (
    update effects e
       set locked_by = null, locked_at_ms = null, last_error = f.error,
           status = case when e.attempts >= e.max_attempts then 'dead' else 'pending' end,
           finished_at_ms = case when e.attempts >= e.max_attempts then clock.ms end,
           run_at_ms = case when e.attempts >= e.max_attempts then e.run_at_ms
                            else clock.ms + least(power(2, e.attempts)::bigint * 1000, 3600000) end
      from locked l, clock, input f
     where l.live and f.id = l.id and e.id = l.id),
  mail as (
    insert into actor_mailbox (instance_id, message_key, payload)
    select l.origin_instance_id, 'effect:' || l.id || ':failed',
           jsonb_build_object('effectId', l.id, 'error', f.error)
      from locked l join input f on f.id = l.id
     where l.live and l.attempts >= l.max_attempts
     order by l.id)
  select l.id, l.origin_instance_id, l.notify_on_complete, l.attempts, l.max_attempts, l.live
    from locked l order by l.id;
end
$$;

-- The claim (workers/effects/scheduler.ts claimEffects), here so that the completion below can
-- run it after its own write: one statement, `skip locked`, so a claim never waits on an
-- effect and never locks an instance (spec: pending claims lock the effect and never
-- subsequently lock the instance). The process must be registered and not stopped, and the
-- claim refreshes its heartbeat (a row lock: a prune that deleted the process first leaves
-- the claim nothing; one queued behind it re-reads the fresh heartbeat). The picked ids go in
-- as an array (`= any(array(...))`): joined as a relation the planner hashed it and scanned
-- the table. Two branches, not `(p_instance is null or origin_instance_id = p_instance)`:
-- plpgsql caches a generic plan per statement, and only an equality on the instance lets that
-- plan read effects_pending_origin (an ActorHost's claim) where the shared claim reads
-- effects_pending from its front.
create or replace function effects_claim(p_process bigint, p_instance text, p_kinds text[], p_limit int)
returns table (id uuid, origin_instance_id text, kind text, args jsonb, status text, locked_by bigint,
               attempts int, max_attempts int, run_at_ms bigint, result jsonb, last_error text)
language plpgsql as $$
#variable_conflict use_column
begin
  if p_instance is null then
    return query
      with alive as (
         update effect_processes set heartbeat_at_ms = app_now_ms()
          where id = p_process and stopped_at_ms is null
          returning id),
       picked as (
         select id from effects
          where status = 'pending' and run_at_ms <= (select app_now_ms())
            and (p_kinds is null or kind = any(p_kinds))
          order by run_at_ms, id
          limit p_limit
          for update skip locked)
       update effects e
          set status = 'processing', locked_by = p_process, locked_at_ms = (select app_now_ms()),
              attempts = e.attempts + 1
        where e.id = any(array(select id from picked))
          and exists (select 1 from alive)
       returning e.id, e.origin_instance_id, e.kind, e.args, e.status, e.locked_by, e.attempts,
                 e.max_attempts, e.run_at_ms, e.result, e.last_error;
  else
    return query
      with alive as (
         update effect_processes set heartbeat_at_ms = app_now_ms()
          where id = p_process and stopped_at_ms is null
          returning id),
       picked as (
         select id from effects
          where status = 'pending' and run_at_ms <= (select app_now_ms())
            and origin_instance_id = p_instance
            and (p_kinds is null or kind = any(p_kinds))
          order by run_at_ms, id
          limit p_limit
          for update skip locked)
       update effects e
          set status = 'processing', locked_by = p_process, locked_at_ms = (select app_now_ms()),
              attempts = e.attempts + 1
        where e.id = any(array(select id from picked))
          and exists (select 1 from alive)
       returning e.id, e.origin_instance_id, e.kind, e.args, e.status, e.locked_by, e.attempts,
                 e.max_attempts, e.run_at_ms, e.result, e.last_error;
  end if;
end
$$;

-- The completion of one batch and the claim of the next in one statement, so one transaction
-- and one commit per batch of a drain instead of two (issue 35: the drain waited on its
-- commits' WAL flushes; docs/effects.md "Processes, claims, completion"). effects_complete
-- runs first and unchanged (instance locks, then effects in ID order, then its write and
-- callbacks); the claim after it takes no instance lock and never waits (`skip locked`), so
-- the spec's lock order holds: every lock it adds comes after the completion's, and none
-- waits. A failure of either rolls back both: the batch is not written and nothing is claimed.
-- `claimed` tells the two kinds of row apart: the completion's locked rows (with `live`), then
-- the claimed effects.
create or replace function effects_complete_then_claim(
  p_process bigint, p_ids uuid[], p_results text[], p_budget_ms int,
  p_instance text, p_kinds text[], p_limit int)
returns table (claimed boolean, id uuid, origin_instance_id text, notify_on_complete boolean,
               attempts int, max_attempts int, live boolean, kind text, args jsonb, status text,
               locked_by bigint, run_at_ms bigint, result jsonb, last_error text)
language plpgsql as $$
#variable_conflict use_column
begin
  return query
    select false, c.id, c.origin_instance_id, c.notify_on_complete, c.attempts, c.max_attempts,
           c.live, null::text, null::jsonb, null::text, null::bigint, null::bigint, null::jsonb,
           null::text
      from effects_complete(p_process, p_ids, p_results, p_budget_ms) c;
  return query
    select true, n.id, n.origin_instance_id, null::boolean, n.attempts, n.max_attempts, null::boolean,
           n.kind, n.args, n.status, n.locked_by, n.run_at_ms, n.result, n.last_error
      from effects_claim(p_process, p_instance, p_kinds, p_limit) n;
end
$$;
