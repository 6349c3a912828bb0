import { AppError } from '../errors';
import type { Admission } from './directory';
import { lockIssuance, lockOperation } from './locks';
import { readReactions } from './reactions';
import type { Intent, Queryable, TicketRow } from './types';

/**
 * Ticket issuance and lookup. One ticket per (actor, operation ID); issuing again with the
 * same intent returns the same ticket (a retried request after a lost response), with a
 * different intent is 409, and after expiry is 410: a new reaction needs a new operation ID.
 */
export interface IssueInput {
  actorId: string;
  operationId: string;
  intent: Intent;
  admission: Admission;
  ttlSeconds: number;
  keyVersion: string;
  /** REACTION_TICKET_MAX_OUTSTANDING: the actor's unexpired, unapplied, unretired tickets. */
  maxOutstanding: number;
}

/** Retry-After for a full actor: until its first outstanding ticket expires, at most a minute. */
const MAX_OUTSTANDING_RETRY_S = 60;

export function sameIntent(t: Pick<TicketRow, 'message_id' | 'emoji' | 'desired'>, i: Intent): boolean {
  return t.message_id === i.messageId && t.emoji === i.emoji && t.desired === i.desired;
}

// One app_now() for both columns, so the window is exactly the configured TTL.
const INSERT_SQL = `
  with n as (select app_now() as now)
  insert into private.reaction_tickets
    (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, key_version,
     created_at, expires_at)
  select $1, $2, $3, $4, $5, $6, $7, $8, n.now, n.now + $9 * interval '1 second' from n
  on conflict (actor_id, operation_id) do nothing
  returning *`;

const USED_SQL = `
  select exists (select 1 from private.chat_reaction_operations where actor_id = $1 and operation_id = $2)
      or exists (select 1 from private.chat_retired_reaction_operations where actor_id = $1 and operation_id = $2)
    as used`;

/**
 * Runs inside a transaction; takes the operation lock so issuance and writes serialize, then
 * (for a new ticket only) the actor's issuance lock for the outstanding bound.
 */
export async function issueTicket(
  client: Queryable,
  input: IssueInput,
): Promise<{ ticket: TicketRow; replayed: boolean }> {
  const { actorId, operationId, intent, admission } = input;
  await lockOperation(client, actorId, operationId);
  const existing = await findTicketByOperation(client, actorId, operationId);
  if (existing) {
    if (!sameIntent(existing, intent))
      throw new AppError('intent_mismatch', 'This operation ID was issued for a different intent');
    const { rows } = await client.query<{ expired: boolean }>(
      'select app_now() >= $1::timestamptz as expired',
      [existing.expires_at],
    );
    if (rows[0]!.expired) await throwExpired(client, existing, null);
    return { ticket: existing, replayed: true };
  }
  const { rows: used } = await client.query<{ used: boolean }>(USED_SQL, [actorId, operationId]);
  if (used[0]!.used) throw new AppError('conflict', 'This operation ID was already used; choose a new one');
  await assertUnderOutstandingBound(client, actorId, input.maxOutstanding);
  const { rows } = await client.query<TicketRow>(INSERT_SQL, [
    actorId,
    operationId,
    admission.workspaceId,
    admission.conversationId,
    intent.messageId,
    intent.emoji,
    intent.desired,
    input.keyVersion,
    input.ttlSeconds,
  ]);
  return { ticket: rows[0]!, replayed: false };
}

export async function findTicketByOperation(
  client: Queryable,
  actorId: string,
  operationId: string,
): Promise<TicketRow | null> {
  const { rows } = await client.query<TicketRow>(
    'select * from private.reaction_tickets where actor_id = $1 and operation_id = $2',
    [actorId, operationId],
  );
  return rows[0] ?? null;
}

/**
 * The actor's outstanding tickets (unexpired, neither applied nor retired), counted up to
 * `limit`, and the seconds until the first of them expires. A ticket stops being outstanding
 * in the transaction that applies or retires it, or when its expiry passes: nothing to release.
 */
const OUTSTANDING_SQL = `
  with live as (
    select t.expires_at from private.reaction_tickets t
    where t.actor_id = $1 and t.expires_at > app_now()
      and not exists (select 1 from private.chat_reaction_operations o
                      where o.actor_id = t.actor_id and o.operation_id = t.operation_id)
      and not exists (select 1 from private.chat_retired_reaction_operations f
                      where f.actor_id = t.actor_id and f.operation_id = t.operation_id)
    order by t.expires_at limit $2)
  select count(*)::int as n,
         ceil(extract(epoch from min(expires_at) - app_now()))::int as first_expiry_s
  from live`;

/**
 * The outstanding bound, enforced where the tickets live. Every new ticket of one actor is
 * inserted under the per-actor issuance lock, and this count is its own statement after the
 * lock is granted (read committed: a fresh snapshot that sees every ticket committed by an
 * earlier holder), so no interleaving of requests can pass the bound. Applying, retiring and
 * expiry only ever lower the count, so they need not take the lock.
 */
async function assertUnderOutstandingBound(client: Queryable, actorId: string, max: number): Promise<void> {
  await lockIssuance(client, actorId);
  const { rows } = await client.query<{ n: number; first_expiry_s: number | null }>(OUTSTANDING_SQL, [
    actorId,
    max,
  ]);
  const { n, first_expiry_s } = rows[0]!;
  if (n < max) return;
  const retryAfterSeconds = Math.min(MAX_OUTSTANDING_RETRY_S, Math.max(1, first_expiry_s ?? 1));
  throw new AppError(
    'quota_exceeded',
    'Too many outstanding tickets; apply or retire some first',
    { reason: 'outstanding', retryAfterSeconds },
    { 'retry-after': String(retryAfterSeconds) },
  );
}

/**
 * The terminal expiry answer: 410 operation_expired with the exact current reactions. It
 * carries the receipt when one is still retained and never says the operation did not apply.
 */
export async function throwExpired(client: Queryable, ticket: TicketRow, receipt: unknown): Promise<never> {
  const current = await readReactions(client, ticket.message_id);
  throw new AppError(
    'operation_expired',
    'This operation expired; stop replaying it. The reactions shown are the current truth; ' +
      'whether it applied earlier is reflected there. A new reaction needs a new ticket.',
    {
      operationId: ticket.operation_id,
      expiredAt: new Date(ticket.expires_at).toISOString(),
      receipt,
      message: current,
    },
  );
}
