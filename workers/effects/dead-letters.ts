import type { Queryable as Q } from './types';

/**
 * Operator handling of dead-lettered mailbox messages (docs/effects.md "Poison messages"):
 * each is one statement on one row, fenced by `state = 'dead'`, so a message already requeued,
 * discarded or pruned changes nothing (the caller answers not_found).
 *
 * Requeue: back to pending with a fresh attempt count, available now. Its id is unchanged, so
 * it takes its old place first in its instance's line (the drain delivers in id order); the
 * caller wakes the host, and the minute cron's mailbox polling delivers it if that wake-up is lost.
 */
const REQUEUE = `
update actor_mailbox set state = 'pending', attempts = 0, dead_at_ms = null, available_at_ms = app_now_ms()
where id = $1 and state = 'dead'
returning instance_id`;

/** Discard: deleted now instead of at the 1-day mailbox retention. */
const DISCARD = `delete from actor_mailbox where id = $1 and state = 'dead' returning instance_id`;

export async function requeueDeadMessage(q: Q, messageId: string): Promise<string | null> {
  const { rows } = await q.query<{ instance_id: string }>(REQUEUE, [messageId]);
  return rows[0]?.instance_id ?? null;
}

export async function discardDeadMessage(q: Q, messageId: string): Promise<string | null> {
  const { rows } = await q.query<{ instance_id: string }>(DISCARD, [messageId]);
  return rows[0]?.instance_id ?? null;
}
