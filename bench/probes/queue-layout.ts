// The "queue table" layout proposed in issue 35's notes, as SQL only, for the effects probe
// (PROBE_LAYOUT=queue-table in effects-vs-graphile.ts). Not the runtime: no fencing beyond
// `locked_by`, no failure path, no recovery. It answers one question before anyone builds it:
// does moving the in-flight state out of `effects` bring the drain to graphile-worker's rate?
// Answer (docs/benchmarks.md, 6 Dec): no. 0.82-0.87 against 0.83-0.92 as built, same series, on
// PG 15 and 18: the work per effect moves to the queue row (a non-HOT claim, a delete) rather than
// shrinking.
//
// - `effect_queue` holds pending and processing effects (narrow rows, the claim's and the
//   recovery's indexes); a completion deletes its row, which adds no index entry.
// - `effects` keeps the durable record with no index on `status` or `locked_by`, so the
//   completion's one write (status, result, finished_at_ms) can be HOT under fillfactor 50.
// - Same instance-before-effect lock order in the completion: origins `for share`, ordered,
//   in their own statement first.
import type { Pool } from '@neondatabase/serverless';

export const QUEUE_LAYOUT_SQL = `
drop index effects_pending;
drop index effects_pending_origin;
drop index effects_processing;
drop index effects_origin_status;
create index effects_origin on effects (origin_instance_id, id);
create table effect_queue (
  effect_id uuid primary key references effects (id) on delete cascade,
  origin_instance_id text not null,
  run_at_ms bigint not null,
  locked_by bigint,
  locked_at_ms bigint
);
create index effect_queue_pending on effect_queue (run_at_ms, effect_id) where locked_by is null;
create index effect_queue_processing on effect_queue (locked_by, effect_id) where locked_by is not null;
create index effect_queue_origin on effect_queue (origin_instance_id, effect_id);
create function probe_queue_complete(p_process bigint, p_ids uuid[], p_results text[])
returns setof uuid language plpgsql as $$
begin
  perform 1 from actor_instances i
    where i.id in (select q.origin_instance_id from effect_queue q where q.effect_id = any(p_ids))
    order by i.id for share;
  return query
    with gone as (
      delete from effect_queue q where q.effect_id = any(p_ids) and q.locked_by = p_process
      returning q.effect_id),
    done as (
      update effects e set status = 'completed', result = r.result::jsonb, locked_by = null,
             locked_at_ms = null, finished_at_ms = (select app_now_ms())
        from unnest(p_ids, p_results) as r(id, result)
       where r.id = e.id and e.id in (select effect_id from gone)
       returning e.id)
    select id from done;
end
$$;
`;

/** Stages the queue rows of the effects the probe just inserted. */
export const QUEUE_LAYOUT_PRELOAD_SQL = `
insert into effect_queue (effect_id, origin_instance_id, run_at_ms)
select id, origin_instance_id, run_at_ms from effects where status = 'pending'
on conflict do nothing`;

export async function queueClaim(q: Pool, processId: string, limit: number) {
  const { rows } = await q.query<{ id: string }>(
    `with alive as (
       update effect_processes set heartbeat_at_ms = app_now_ms()
        where id = $1 and stopped_at_ms is null
        returning id),
     picked as (
       select effect_id from effect_queue
        where locked_by is null and run_at_ms <= (select app_now_ms())
        order by run_at_ms, effect_id
        limit $2
        for update skip locked),
     claimed as (
       update effect_queue q set locked_by = $1, locked_at_ms = (select app_now_ms())
        where q.effect_id = any(array(select effect_id from picked))
          and exists (select 1 from alive)
        returning q.effect_id)
     select e.id, e.origin_instance_id, e.kind, e.args, e.attempts, e.max_attempts
       from effects e where e.id = any(array(select effect_id from claimed))`,
    [processId, limit],
  );
  return rows;
}

export async function queueComplete(q: Pool, processId: string, ids: string[]) {
  const { rows } = await q.query('select * from probe_queue_complete($1, $2, $3)', [
    processId,
    ids,
    ids.map(() => 'null'),
  ]);
  return rows.length;
}
