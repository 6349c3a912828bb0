import { deleteBatch, type Q } from './batch';

/**
 * Idle conversations: no input for `idle` (channel_conversations_updated) and nothing left
 * that names the session. Deleting the row restarts the conversation's numbering at
 * position 1, revision 1 on its next message (the webhook's statement in
 * workers/channel/accept.ts upserts it), so the row goes only when no earlier number can
 * collide or be misread:
 * - no input rows (lark_inbound_messages_session_position is unique per position);
 * - no turns, no live ledger rows and no settlement cutoffs of the session (a cutoff of the
 *   old numbering would end a new input's badge right after its Add: channel/liveness.ts);
 * - no mailbox row at all for the actor instance (`in:<position>` keys would dedupe a new
 *   input away), no pending or processing effect it emitted;
 * - the actor instance is idle: no timer, no pending input, no running turn (its
 *   duplicate check compares positions with the running turn's cutoff).
 * The actor instance itself stays (the effect runtime's table). The webhook's upsert holds
 * the conversation row lock until it commits, so SKIP LOCKED passes over a conversation
 * taking an input; one that took an input after our snapshot fails the re-checked age.
 */
const PRUNE_CONVERSATIONS = `
with old as (
  select c.id as old_id from channel_conversations c
   where c.updated_at < app_now() - $1 * interval '1 millisecond'
     and not exists (select 1 from lark_inbound_messages i where i.session_id = c.id)
     and not exists (select 1 from channel_turns t where t.session_id = c.id)
     and not exists (select 1 from channel_typing_reaction r
                      where r.session_id = c.id and r.cleaned_at is null and r.abandoned_at is null)
     and not exists (select 1 from channel_typing_settlement s where s.session_id = c.id)
     and not exists (select 1 from actor_mailbox m where m.instance_id = c.id)
     and not exists (select 1 from effects e where e.origin_instance_id = c.id and e.status = 'pending')
     and not exists (select 1 from effects e where e.origin_instance_id = c.id and e.status = 'processing')
     and not exists (select 1 from actor_instances a
                      where a.id = c.id
                        and (a.wake_at_ms is not null
                             or jsonb_array_length(coalesce(a.state -> 'pending', '[]')) > 0
                             or coalesce(a.state -> 'turn', 'null') <> 'null'::jsonb))
   order by c.updated_at
   limit $2
   for update of c skip locked
)
delete from channel_conversations using old where id = old_id`;

export async function pruneIdleConversations(q: Q, idleMs: number, batch: number): Promise<number> {
  return deleteBatch(q, PRUNE_CONVERSATIONS, [idleMs, batch]);
}
