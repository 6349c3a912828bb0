// Replacements of effects_complete for the effects probe (PROBE_COMPLETION=<name> in
// effects-vs-graphile.ts), each dropping or moving one thing the real write-back does
// (migrations/functions/effects_write_back.sql), to price it: the instance locks the spec requires
// before the effect lock, the ordered effect lock, plpgsql, and keeping the finished row in
// `effects`. Diagnostics only: several break guarantees (named in each comment), and none has
// the failure path. docs/benchmarks.md "10 effects: what each part of the write-back costs".
const SIGNATURE = `effects_complete(p_process bigint, p_ids uuid[], p_results text[], p_budget_ms int)
returns table (id uuid, origin_instance_id text, notify_on_complete boolean, attempts int,
               max_attempts int, live boolean)`;

const UPDATE_LIVE = `
  update effects e set status = 'completed', result = r.result::jsonb, locked_by = null,
         locked_at_ms = null, finished_at_ms = (select app_now_ms())
    from unnest(p_ids, p_results) as r(id, result)
   where r.id = e.id and e.status = 'processing' and e.locked_by = p_process
  returning e.id, e.origin_instance_id, e.notify_on_complete, e.attempts, e.max_attempts, true`;

const DELETE_LIVE = `
  delete from effects e where e.id = any(p_ids) and e.locked_by = p_process
  returning e.id, e.origin_instance_id, e.notify_on_complete, e.attempts, e.max_attempts, true`;

export const COMPLETION_VARIANTS: Record<string, string> = {
  // plpgsql as today, instance locks kept, no ordered `for update` of the effects before the
  // update (the update's own row locks follow its plan's order).
  lean: `create or replace function ${SIGNATURE} language plpgsql as $$
#variable_conflict use_column
begin
  perform effects_lock_origins(p_ids, p_budget_ms);
  return query ${UPDATE_LIVE};
end
$$;`,
  // The same update as one SQL statement with the instance locks before it (SQL function).
  'update-sql': `create or replace function ${SIGNATURE} language sql as $$
  select effects_lock_origins(p_ids, p_budget_ms);
  ${UPDATE_LIVE}
$$;`,
  // No instance lock at all (breaks "completion/failure lock the instance before the effect").
  'update-unlocked': `create or replace function ${SIGNATURE} language sql as $$${UPDATE_LIVE}
$$;`,
  // The finished row deleted, as graphile-worker does (breaks the finished record and its retention).
  delete: `create or replace function ${SIGNATURE} language sql as $$${DELETE_LIVE}
$$;`,
  // The same delete after the instance locks.
  'delete-locked': `create or replace function ${SIGNATURE} language sql as $$
  select effects_lock_origins(p_ids, p_budget_ms);
  ${DELETE_LIVE}
$$;`,
  // Terminal rows in their own narrow table: instance locks, then the live row deleted from
  // effects and its outcome inserted into effect_outcomes (primary key only) in one statement.
  outcomes: `create table effect_outcomes (
  id uuid primary key, origin_instance_id text not null, kind text not null, status text not null,
  attempts int not null, result jsonb, last_error text, created_at_ms bigint not null,
  finished_at_ms bigint not null);
create or replace function ${SIGNATURE} language sql as $$
  select effects_lock_origins(p_ids, p_budget_ms);
  with gone as (
    delete from effects e where e.id = any(p_ids) and e.locked_by = p_process
    returning e.id, e.origin_instance_id, e.kind, e.notify_on_complete, e.attempts,
              e.max_attempts, e.created_at_ms),
  kept as (
    insert into effect_outcomes (id, origin_instance_id, kind, status, attempts, result,
                                 created_at_ms, finished_at_ms)
    select g.id, g.origin_instance_id, g.kind, 'completed', g.attempts, r.result::jsonb,
           g.created_at_ms, app_now_ms()
      from gone g join unnest(p_ids, p_results) as r(id, result) on r.id = g.id)
  select g.id, g.origin_instance_id, g.notify_on_complete, g.attempts, g.max_attempts, true
    from gone g
$$;`,
};
