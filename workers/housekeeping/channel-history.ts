import { deleteBatch, type Q } from './batch';

/**
 * Terminal turns, `period` after they settled (channel_turns_settled). Only a turn with an
 * outcome is ever touched: a running turn (outcome null) is still moved by the actor's
 * fenced commits (workers/channel/turns.ts). A terminal turn is kept while
 * - its reply effect is still pending or processing (nothing should, after a terminal turn);
 * - a live ledger row of its session and revision sits at or below its cutoff: the ledger's
 *   revalidation (workers/channel/liveness.ts) reads "a terminal turn covers the input" to
 *   decide the badge is owed a withdrawal, so the covering turn must outlive that row.
 */
const PRUNE_TURNS = `
with old as (
  select t.session_id as s_id, t.turn_no as t_no from channel_turns t
   where t.settled_at is not null
     and t.settled_at < app_now() - $1 * interval '1 millisecond'
     and not exists (select 1 from effects e
                      where e.id = t.effect_id and e.status in ('pending', 'processing'))
     and not exists (select 1 from channel_typing_reaction r
                      where r.session_id = t.session_id and r.context_revision = t.context_revision
                        and r.input_position <= t.cutoff_position
                        and r.cleaned_at is null and r.abandoned_at is null)
   order by t.settled_at
   limit $2
   for update of t skip locked
)
delete from channel_turns using old where session_id = s_id and turn_no = t_no`;

/**
 * Inputs, `period` after they arrived (lark_inbound_messages_created). An input is kept while
 * - its ledger row is live (not cleaned, not abandoned): the badge may still be owed;
 * - it waits in the actor's mailbox (`in:<position>`, not yet delivered);
 * - the actor holds it: in its pending list or in its running turn (actor state);
 * - a turn that is not terminal covers it.
 * Anything else is history: the actor keeps the text it needs in its own state, and a
 * terminal turn never reads its inputs again. Pre-engine rows (no session) age out alone.
 */
const PRUNE_INPUTS = `
with old as (
  select i.id as old_id from lark_inbound_messages i
   where i.created_at < app_now() - $1 * interval '1 millisecond'
     and not exists (select 1 from channel_typing_reaction r
                      where r.installation_id = i.installation_id and r.source_message_id = i.message_id
                        and r.cleaned_at is null and r.abandoned_at is null)
     and (i.session_id is null or (
       not exists (select 1 from actor_mailbox m
                    where m.instance_id = i.session_id and m.message_key = 'in:' || i.position
                      and m.state = 'pending')
       and not exists (select 1 from actor_instances a
                        where a.id = i.session_id
                          and (coalesce(a.state -> 'pending', '[]') @> jsonb_build_array(jsonb_build_object('position', i.position))
                               or coalesce(a.state -> 'turn' -> 'inputs', '[]') @> jsonb_build_array(jsonb_build_object('position', i.position))))
       and not exists (select 1 from channel_turns t
                        where t.session_id = i.session_id and t.outcome is null
                          and t.context_revision = i.context_revision
                          and i.position between t.first_position and t.cutoff_position)))
   order by i.created_at
   limit $2
   for update of i skip locked
)
delete from lark_inbound_messages using old where id = old_id`;

export async function pruneTerminalTurns(q: Q, periodMs: number, batch: number): Promise<number> {
  return deleteBatch(q, PRUNE_TURNS, [periodMs, batch]);
}

export async function pruneSettledInputs(q: Q, periodMs: number, batch: number): Promise<number> {
  return deleteBatch(q, PRUNE_INPUTS, [periodMs, batch]);
}

/**
 * Recalls (channel_recalled_messages, migration 0210), `period` after they were recorded, once
 * no input of that message is left: while an input exists its recall is what keeps it from being
 * answered or badged (accept, liveness, the post claim and the reply deletion read it), so the
 * recall goes only after the input step deleted the input. A recall whose message never came
 * is history after the period too (Lark retries a delivery for about 7.1 h).
 */
const PRUNE_RECALLS = `
with old as (
  select r.installation_id as i_id, r.message_id as m_id from channel_recalled_messages r
   where r.recorded_at < app_now() - $1 * interval '1 millisecond'
     and not exists (select 1 from lark_inbound_messages i
                      where i.installation_id = r.installation_id and i.message_id = r.message_id)
   order by r.recorded_at
   limit $2
   for update of r skip locked
)
delete from channel_recalled_messages using old where installation_id = i_id and message_id = m_id`;

export async function pruneRecalledMessages(q: Q, periodMs: number, batch: number): Promise<number> {
  const { rowCount } = await q.query(PRUNE_RECALLS, [periodMs, batch]);
  return rowCount ?? 0;
}
