import { AppError } from '../errors';
import { expiredMessage } from './contract-answers';
import type { Admission } from './directory';
import { lockIssuance, lockOperation } from './locks';
import { operationStampMs } from './operation-id';
import { readReactions } from './reactions';
import { findReceipt } from './receipts';
import {
  type Intent,
  type MessageReactions,
  type Queryable,
  type Receipt,
  type TicketRow,
  toReceipt,
} from './types';

/**
 * Ticket issuance and lookup. One ticket per (actor, operation ID); issuing again with the
 * same intent returns the same ticket (a retried request after a lost response), with a
 * different intent is 409, and after expiry is 410: a new reaction needs a new operation ID.
 *
 * The admission window (`ttlSeconds`, REACTION_TICKET_TTL_SECONDS) runs from the operation's
 * creation, stamped in its ID (operation-id.ts), not from issuance: an operation stamped more
 * than the window ago never gets a ticket (410), and a ticket expires at most the window after
 * its operation's stamp. So no operation older than the window can be admitted, even after
 * housekeeping deleted its ticket and the cleanup its receipt: the refusal needs no row. The
 * window of an operation is the smallest one in force at any time since its stamp (recorded by
 * issuance, migrations/0020_baseline_reaction_tickets.sql): raising REACTION_TICKET_TTL_SECONDS widens it only for operations
 * stamped after the raise, so an operation judged expired (and maybe forgotten) stays so.
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

/**
 * How far ahead of database time an operation's stamp may be (device clocks run fast). A
 * stamp further ahead is refused (422, with the server time so the client can correct its
 * clock), because it would keep its operation admissible for longer than the window.
 */
export const MAX_FUTURE_STAMP_MS = 5 * 60_000;

export function sameIntent(t: Pick<TicketRow, 'message_id' | 'emoji' | 'desired'>, i: Intent): boolean {
  return t.message_id === i.messageId && t.emoji === i.emoji && t.desired === i.desired;
}

// One app_now() for both columns. The expiry is the window after the operation's stamp (or
// after now, for a stamp up to MAX_FUTURE_STAMP_MS ahead), never later. The window is decided
// here, with the insert's own clock: issuance reads the time before it waits on the issuance
// lock, and a window that ended during the wait inserts nothing (issue 29 hole 7; the row
// would break `expires_at > created_at`) and is answered 410 like one past at the first read.
const INSERT_SQL = `
  with n as (select app_now() as now,
                    least(app_now(), to_timestamp($10::double precision / 1000)) + $9 * interval '1 second'
                      as expires_at)
  insert into private.reaction_tickets
    (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, key_version,
     created_at, expires_at)
  select $1, $2, $3, $4, $5, $6, $7, $8, n.now, n.expires_at from n
  where n.expires_at > n.now
  on conflict (actor_id, operation_id) do nothing
  returning *`;

// Records the window this issuance runs under when it is not the latest recorded one
// (migrations/0020_baseline_reaction_tickets.sql). Two issuances racing on a change may both insert: the same window twice
// at nearly the same time, which changes no minimum.
const RECORD_WINDOW_SQL = `
  insert into private.reaction_ticket_windows (in_force_from, ttl_seconds)
  select app_now(), $1::int
  where $1::int is distinct from
    (select ttl_seconds from private.reaction_ticket_windows order by in_force_from desc limit 1)`;

// Read in the statement after the operation lock: fresh time, whether the ID was used, and the
// operation's window: the smallest in force at any time since its stamp ($3, epoch ms), the
// one in force at the stamp and the configured one ($4) included (migrations/0020_baseline_reaction_tickets.sql).
const STATE_SQL = `
  with stamp as (select to_timestamp($3::double precision / 1000) as at)
  select (extract(epoch from app_now()) * 1000)::bigint as now_ms,
    exists (select 1 from private.chat_reaction_operations where actor_id = $1 and operation_id = $2)
      or exists (select 1 from private.chat_retired_reaction_operations where actor_id = $1 and operation_id = $2)
    as used,
    least($4::int,
      (select min(w.ttl_seconds) from private.reaction_ticket_windows w, stamp
       where w.in_force_from > stamp.at
          or w.in_force_from = (select max(v.in_force_from) from private.reaction_ticket_windows v
                                where v.in_force_from <= stamp.at))) as ttl_seconds
  from stamp`;

/**
 * Runs inside a transaction; takes the operation lock so issuance and writes serialize, then
 * (for a new ticket only) the actor's issuance lock for the outstanding bound.
 */
export async function issueTicket(
  client: Queryable,
  input: IssueInput,
): Promise<{ ticket: TicketRow; replayed: boolean }> {
  const { actorId, operationId } = input;
  const stampMs = operationStampMs(operationId);
  if (stampMs === null)
    throw new AppError('validation_failed', 'operationId must be a UUIDv7 stamped when the choice was made');
  await lockOperation(client, actorId, operationId);
  const existing = await findTicketByOperation(client, actorId, operationId);
  if (existing) return { ticket: await replayTicket(client, existing, input), replayed: true };
  const { nowMs, ttlSeconds, used } = await judgeWindow(client, input, stampMs);
  // Past the window (whatever was kept or deleted): terminal, with the receipt if one is kept.
  const expiresMs = stampMs + ttlSeconds * 1000;
  if (expiresMs <= nowMs) throw await issueExpired(client, input, stampMs, expiresMs, nowMs);
  if (used) throw new AppError('conflict', 'This operation ID was already used; choose a new one');
  await assertUnderOutstandingBound(client, actorId, input.maxOutstanding);
  const inserted = await insertTicket(client, input, ttlSeconds, stampMs);
  if (inserted) return { ticket: inserted, replayed: false };
  // Nothing inserted: the window ended while this waited on the issuance lock (under the
  // operation lock no other issuance of this ID can have inserted it). Fresh time for the answer.
  const { rows: after } = await client.query<{ now_ms: string }>(
    'select (extract(epoch from app_now()) * 1000)::bigint as now_ms',
  );
  throw await issueExpired(client, input, stampMs, expiresMs, Number(after[0]!.now_ms));
}

/** The ticket already issued for this operation, again: the same intent, and not expired. */
async function replayTicket(client: Queryable, existing: TicketRow, input: IssueInput): Promise<TicketRow> {
  if (!sameIntent(existing, input.intent))
    throw new AppError('intent_mismatch', 'This operation ID was issued for a different intent');
  const { rows } = await client.query<{ expired: boolean }>(
    'select app_now() >= $1::timestamptz as expired',
    [existing.expires_at],
  );
  if (rows[0]!.expired) {
    const receipt = await findReceipt(client, input.actorId, input.operationId);
    await throwExpired(client, existing, receipt && toReceipt(receipt));
  }
  return existing;
}

/**
 * Records today's window, then reads database time, the shortest window the operation was
 * judged under (a raise reopens nothing) and whether its ID was used; refuses a stamp too far
 * in the future.
 */
async function judgeWindow(
  client: Queryable,
  input: IssueInput,
  stampMs: number,
): Promise<{ nowMs: number; ttlSeconds: number; used: boolean }> {
  await client.query(RECORD_WINDOW_SQL, [input.ttlSeconds]);
  const { rows } = await client.query<{ now_ms: string; used: boolean; ttl_seconds: number }>(STATE_SQL, [
    input.actorId,
    input.operationId,
    stampMs,
    input.ttlSeconds,
  ]);
  const nowMs = Number(rows[0]!.now_ms);
  if (stampMs > nowMs + MAX_FUTURE_STAMP_MS)
    throw new AppError(
      'operation_clock_skew',
      'The operation ID is stamped in the future; stamp new choices with server time',
      {
        operationId: input.operationId,
        stampedAt: iso(stampMs),
        serverTime: iso(nowMs),
        maxFutureSkewMs: MAX_FUTURE_STAMP_MS,
      },
    );
  return { nowMs, ttlSeconds: rows[0]!.ttl_seconds, used: rows[0]!.used };
}

/** The new ticket, or null when its window ended before the insert (INSERT_SQL's guard). */
async function insertTicket(
  client: Queryable,
  input: IssueInput,
  ttlSeconds: number,
  stampMs: number,
): Promise<TicketRow | null> {
  const { actorId, operationId, intent, admission } = input;
  const { rows } = await client.query<TicketRow>(INSERT_SQL, [
    actorId,
    operationId,
    admission.workspaceId,
    admission.conversationId,
    intent.messageId,
    intent.emoji,
    intent.desired,
    input.keyVersion,
    ttlSeconds,
    stampMs,
  ]);
  return rows[0] ?? null;
}

/** The expiry answer of an issuance, with the receipt if one is kept. */
async function issueExpired(
  client: Queryable,
  input: IssueInput,
  stampMs: number,
  expiredAt: number,
  nowMs: number,
): Promise<AppError> {
  const receipt = await findReceipt(client, input.actorId, input.operationId);
  return expiredError(client, {
    operationId: input.operationId,
    stampMs,
    expiredAt,
    nowMs,
    receipt: receipt && toReceipt(receipt),
    messageId: input.intent.messageId,
  });
}

const iso = (t: number | string | Date) => new Date(t).toISOString();

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
 * The terminal expiry answer: 410 operation_expired with the exact current reactions, written
 * once for the ticketed write's SQL answer (ticket-call.ts) and the checks made here. It
 * carries the receipt when one is still retained and never says the operation did not apply.
 * `serverTime` lets a client correct the clock it stamps new operations with.
 */
export function expiredAnswer(e: {
  operationId: string;
  stampMs?: number | null;
  expiredAt: number | string | Date;
  serverTime: number | string | Date;
  receipt: Receipt | null;
  message: MessageReactions | null;
}): AppError {
  return new AppError('operation_expired', expiredMessage, {
    operationId: e.operationId,
    stampedAt: e.stampMs == null ? null : iso(e.stampMs),
    expiredAt: iso(e.expiredAt),
    serverTime: iso(e.serverTime),
    receipt: e.receipt,
    message: e.message,
  });
}

/** The expiry answer after reading the current reactions (and the time, when not given). */
export async function expiredError(
  client: Queryable,
  e: {
    operationId: string;
    stampMs?: number | null;
    expiredAt: number | Date;
    nowMs?: number;
    receipt: Receipt | null;
    messageId: string;
  },
): Promise<AppError> {
  const current = await readReactions(client, e.messageId);
  const now =
    e.nowMs ?? (await client.query<{ now: Date }>('select app_now() as now')).rows[0]!.now.valueOf();
  return expiredAnswer({ ...e, serverTime: Number(now), message: current });
}

export async function throwExpired(
  client: Queryable,
  ticket: TicketRow,
  receipt: Receipt | null,
): Promise<never> {
  throw await expiredError(client, {
    operationId: ticket.operation_id,
    stampMs: operationStampMs(ticket.operation_id),
    expiredAt: ticket.expires_at,
    receipt,
    messageId: ticket.message_id,
  });
}
