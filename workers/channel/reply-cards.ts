import type { Pool, PoolClient } from '@neondatabase/serverless';
import type { NoticeLocale } from './notices';

type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

/**
 * `channel_reply_cards` (migrations/0050_baseline_channel.sql): the CardKit card of one turn's streamed reply. Every
 * statement here is one statement on the turn's primary key; none holds a lock past itself, so
 * no lock is ever held across a Lark call.
 */
export interface ReplyCard {
  cardId: string;
  /** The turn's language (notices.ts), recorded with the card. */
  locale: NoticeLocale;
  /** The highest CardKit sequence reserved on the card by any writer. */
  sequence: number;
  sentMessageId: string | null;
  finished: boolean;
}

export interface TurnKey {
  sessionId: string;
  turnNo: number;
}

/** CardKit's `sequence` is an int (reference §6): stay within 1 … 2³¹−1. */
export const MAX_SEQUENCE = 2_147_483_647;

interface Row {
  card_id: string;
  locale: NoticeLocale;
  sequence: number;
  sent_message_id: string | null;
  finished: boolean;
}

const COLUMNS = 'card_id, locale, sequence, sent_message_id, finished_at is not null as finished';

const toCard = (r: Row): ReplyCard => ({
  cardId: r.card_id,
  locale: r.locale,
  sequence: r.sequence,
  sentMessageId: r.sent_message_id,
  finished: r.finished,
});

export async function findCard(q: Q, turn: TurnKey): Promise<ReplyCard | null> {
  const { rows } = await q.query<Row>(
    `select ${COLUMNS} from channel_reply_cards where session_id = $1 and turn_no = $2`,
    [turn.sessionId, turn.turnNo],
  );
  return rows[0] ? toCard(rows[0]) : null;
}

/**
 * Records a created card as the turn's one card, before it is sent. When another writer of the
 * turn recorded one first (an old incarnation still running), its card wins and is returned:
 * ours stays unsent, an orphan Lark never shows.
 */
export async function recordCard(
  q: Q,
  turn: TurnKey & { installationId: string; cardId: string; locale: NoticeLocale },
): Promise<ReplyCard> {
  const { rows } = await q.query<Row>(
    `insert into channel_reply_cards (session_id, turn_no, installation_id, card_id, locale)
     values ($1, $2, $3, $4, $5)
     on conflict (session_id, turn_no) do nothing
     returning ${COLUMNS}`,
    [turn.sessionId, turn.turnNo, turn.installationId, turn.cardId, turn.locale],
  );
  if (rows[0]) return toCard(rows[0]);
  // The conflicting row committed after this statement's snapshot: read it now.
  const winner = await findCard(q, turn);
  if (!winner) throw new Error(`channel_reply_cards: no card recorded for ${turn.sessionId}#${turn.turnNo}`);
  return winner;
}

/**
 * Reserves `count` sequences above every one reserved before, in one statement: the writer owns
 * (last − count, last]. Refused (null) past CardKit's range.
 */
export async function reserveSequences(
  q: Q,
  turn: TurnKey,
  count: number,
): Promise<{ last: number; finished: boolean } | null> {
  const { rows } = await q.query<{ sequence: number; finished: boolean }>(
    `update channel_reply_cards set sequence = sequence + $3::int
      where session_id = $1 and turn_no = $2 and sequence <= $4::int - $3::int
      returning sequence, finished_at is not null as finished`,
    [turn.sessionId, turn.turnNo, count, MAX_SEQUENCE],
  );
  return rows[0] ? { last: rows[0].sequence, finished: rows[0].finished } : null;
}

/** The reply that carries the card was answered: its message id, kept from the first answer. */
export async function markSent(q: Q, turn: TurnKey, messageId: string): Promise<void> {
  await q.query(
    `update channel_reply_cards set sent_message_id = coalesce(sent_message_id, $3)
      where session_id = $1 and turn_no = $2`,
    [turn.sessionId, turn.turnNo, messageId],
  );
}

export async function markFinished(q: Q, turn: TurnKey): Promise<void> {
  await q.query(
    `update channel_reply_cards set finished_at = coalesce(finished_at, app_now())
      where session_id = $1 and turn_no = $2`,
    [turn.sessionId, turn.turnNo],
  );
}

/**
 * The installation's cards still streaming, started in the last 15 minutes (a card whose writer
 * died is finished by the turn's settlement well within that). Through the partial index.
 */
export async function streamingCards(q: Q, installationId: string): Promise<number> {
  const { rows } = await q.query<{ n: number }>(
    `select count(*)::int as n from channel_reply_cards
      where installation_id = $1 and finished_at is null and created_at > app_now() - interval '15 minutes'`,
    [installationId],
  );
  return rows[0]?.n ?? 0;
}

export interface UnfinishedCard extends TurnKey {
  installationId: string;
  locale: NoticeLocale;
  delivered: boolean;
}

/**
 * Cards still streaming whose turn settled more than a minute ago (its settlement's finish
 * failed every attempt, or ran on a release that knows no cards), oldest settlement first, at
 * most `limit`. Through the partial index of cards still streaming.
 */
export async function unfinishedSettledCards(q: Q, limit: number): Promise<UnfinishedCard[]> {
  const { rows } = await q.query<{
    session_id: string;
    turn_no: number;
    installation_id: string;
    locale: NoticeLocale;
    outcome: string;
  }>(
    `select c.session_id, c.turn_no, c.installation_id, c.locale, t.outcome
       from channel_reply_cards c
       join channel_turns t on t.session_id = c.session_id and t.turn_no = c.turn_no
      where c.finished_at is null and t.settled_at < app_now() - interval '1 minute'
      order by t.settled_at limit $1`,
    [limit],
  );
  return rows.map((r) => ({
    sessionId: r.session_id,
    turnNo: r.turn_no,
    installationId: r.installation_id,
    locale: r.locale,
    delivered: r.outcome === 'delivered',
  }));
}
