import { z } from 'zod';
import type { Queryable } from '../effects/types';
import { INSTALLATION_ID } from '../installations/store';

/**
 * The conversation inspector (issue 33 item 4): why did this user get no reply? Finds
 * conversations by Lark chat id, message id or sender open_id, and lays one conversation out
 * on one timeline: its inputs, turns (generations, outcome, re-runs), the agent's and Lark's
 * errors as the effects recorded them, every typing badge row with its attempts and outcome,
 * failure notices, recalls and recalled replies, and the effects and mailbox messages behind them. Read-only, bounded (the
 * newest rows of each kind), and never a message's text, a payload or a credential: an
 * operator sees what happened, not what users wrote.
 */
export const InspectQuery = z.strictObject({
  // Every search is within one installation (an open_id is one app's anyway), so each part is
  // an index probe (FIND_SQL).
  installation: z.string().regex(INSTALLATION_ID, 'an installation id'),
  q: z
    .string()
    .trim()
    .min(1)
    .max(200)
    .regex(/^[A-Za-z0-9_:.-]+$/, 'a Lark chat id, message id or open_id'),
  session: z.string().max(400).optional(),
});

/** Rows of each kind, newest first, in one inspection. */
export const INSPECT_LIMIT = 200;
const MATCH_LIMIT = 20;
/** A sender's newest inputs the search reads for their conversations. */
const SENDER_INPUTS = 200;

export interface ConversationMatch {
  id: string;
  installation_id: string;
  chat_id: string;
  thread_id: string | null;
  last_position: string;
  updated_at: Date;
  /** How it matched: the chat, one of its inputs' message ids, or an input's sender. */
  via: 'chat' | 'message' | 'sender';
}

/** One point of the conversation's history: what, when, and its fields (ids and codes only). */
export interface TimelineEntry {
  at: string | null;
  kind: 'input' | 'turn' | 'badge' | 'effect' | 'mailbox' | 'notice' | 'recall';
  summary: string;
  detail: Record<string, unknown>;
}

/**
 * One installation's conversations by chat id, message id or sender, each part an index probe
 * (pinned by test/node/channel/inspect.plans.test.ts at 200k inputs): the message through the
 * inputs' unique (installation_id, message_id); the chat through
 * channel_conversations_installation_chat and the sender through
 * lark_inbound_messages_installation_sender (migration 0250). Those two cost every webhook input
 * one index entry each (the conversation row's per-input update is not HOT: updated_at is
 * indexed); the search by message id, the common one, costs nothing. A sender is found through
 * their newest SENDER_INPUTS inputs (a backward range of that index), so a prolific sender costs
 * the same as any: the conversations of those inputs, at most MATCH_LIMIT.
 */
export const FIND_SQL = `
select c.id, c.installation_id, c.chat_id, c.thread_id, c.last_position::text, c.updated_at, m.via
  from (
    select id as session_id, 'chat' as via from channel_conversations
     where installation_id = $1 and chat_id = $2
    union
    select session_id, 'message' from lark_inbound_messages
     where installation_id = $1 and message_id = $2 and session_id is not null
    union
    select distinct session_id, 'sender' from (
      select session_id from lark_inbound_messages
       where installation_id = $1 and sender_open_id = $2 and session_id is not null
       order by id desc limit ${SENDER_INPUTS}) s
  ) m
  join channel_conversations c on c.id = m.session_id
 order by c.updated_at desc
 limit $3`;

export async function findConversations(
  db: Queryable,
  installationId: string,
  q: string,
): Promise<ConversationMatch[]> {
  const { rows } = await db.query<ConversationMatch>(FIND_SQL, [installationId, q, MATCH_LIMIT]);
  return rows;
}

const ms = (v: unknown) => (v === null || v === undefined ? null : new Date(Number(v)).toISOString());
const iso = (v: unknown) =>
  v instanceof Date ? v.toISOString() : v === null || v === undefined ? null : String(v);

type Row = Record<string, unknown>;

/**
 * One kind of a session's rows: its statement ($1 the session, $2 the limit, newest rows) and
 * the timeline entries each row becomes.
 */
interface TimelineSource {
  sql: string;
  entries(r: Row): TimelineEntry[];
}

const TIMELINE_SOURCES: TimelineSource[] = [
  {
    sql: `select message_id, event_id, chat_type, sender_open_id, message_type, length(content) as length,
              position::text, context_revision::text, unanswered, created_at
         from lark_inbound_messages where session_id = $1 order by position desc nulls last limit $2`,
    entries: (r) => [
      {
        at: iso(r.created_at),
        kind: 'input',
        summary: `input ${r.position ?? '?'}: ${r.message_type} message ${r.message_id} from ${r.sender_open_id ?? '?'}${r.unanswered ? ` (not answered: ${r.unanswered})` : ''}`,
        detail: r,
      },
    ],
  },
  {
    sql: `select turn_no, context_revision::text, first_position::text, cutoff_position::text, input_count,
              anchor_message_id, delivery_key, generation, effect_id, outcome, reply_message_id, reply_mode,
              rerun_of, rerun_requested_at, started_at, settled_at
         from channel_turns where session_id = $1 order by turn_no desc limit $2`,
    entries: (r) => [
      {
        at: iso(r.started_at),
        kind: 'turn',
        summary: `turn ${r.turn_no} started: inputs ${r.first_position}–${r.cutoff_position}, generation ${r.generation}${r.rerun_of ? `, a re-run of turn ${r.rerun_of}` : ''}`,
        detail: r,
      },
      ...(r.settled_at
        ? [
            {
              at: iso(r.settled_at),
              kind: 'turn' as const,
              summary: `turn ${r.turn_no} ${r.outcome}${r.reply_message_id ? ` (reply ${r.reply_message_id})` : ''}`,
              detail: {
                turn_no: r.turn_no,
                outcome: r.outcome,
                delivery_key: r.delivery_key,
                // What the re-run route accepts (rerun.ts): a failed or retired turn, not re-run yet.
                rerunnable: (r.outcome === 'failed' || r.outcome === 'retired') && !r.rerun_requested_at,
              },
            },
          ]
        : []),
    ],
  },
  {
    sql: `select id, source_message_id, input_position::text, add_state, reaction_id, settled_by,
              settle_outcome, cleaned_at, abandoned_at, attempts, last_attempt_at, next_attempt_at,
              last_error, credentials_refused, manual_removal_outcome, manual_removal_code, created_at
         from channel_typing_reaction where session_id = $1 order by created_at desc limit $2`,
    entries: (r) => [
      {
        at: iso(r.created_at),
        kind: 'badge',
        summary: `badge on ${r.source_message_id}: ${r.add_state}, ${r.cleaned_at ? 'withdrawn' : r.abandoned_at ? 'abandoned' : 'pending'}, ${r.attempts} attempts${r.last_error ? `, last error ${r.last_error}` : ''}`,
        detail: r,
      },
    ],
  },
  {
    sql: `select id, kind, status, attempts, max_attempts, last_error, locked_by::text,
              created_at_ms::text, finished_at_ms::text
         from effects where origin_instance_id = $1 order by id desc limit $2`,
    entries: (r) => [
      {
        at: ms(r.created_at_ms),
        kind: 'effect',
        summary: `effect ${r.kind}: ${r.status} after ${r.attempts} of ${r.max_attempts} attempts${r.last_error ? `, ${String(r.last_error).slice(0, 200)}` : ''}`,
        detail: r,
      },
    ],
  },
  {
    sql: `select id::text, message_key, state, attempts, last_error, created_at_ms::text,
              delivered_at_ms::text, dead_at_ms::text
         from actor_mailbox where instance_id = $1 order by id desc limit $2`,
    entries: (r) => [
      {
        at: ms(r.created_at_ms),
        kind: 'mailbox',
        summary: `message ${r.message_key}: ${r.state}${Number(r.attempts) > 0 ? `, ${r.attempts} failed deliveries` : ''}${r.last_error ? `, ${String(r.last_error).slice(0, 200)}` : ''}`,
        detail: r,
      },
    ],
  },
  {
    sql: `select turn_no, kind, message_id, add_attempts, posted_at, created_at
         from channel_failure_notices where session_id = $1 order by turn_no desc limit $2`,
    entries: (r) => [
      {
        at: iso(r.created_at),
        kind: 'notice',
        summary: `failure notice (${r.kind}) for turn ${r.turn_no}: ${r.posted_at ? 'posted' : 'not posted yet'}`,
        detail: r,
      },
    ],
  },
  {
    sql: `select r.message_id, r.recall_type, r.recorded_at
         from channel_recalled_messages r join channel_conversations c on c.installation_id = r.installation_id
        where c.id = $1 and r.message_id in (select message_id from lark_inbound_messages where session_id = $1)
        order by r.recorded_at desc limit $2`,
    entries: (r) => [
      {
        at: iso(r.recorded_at),
        kind: 'recall',
        summary: `message ${r.message_id} recalled by its user${r.recall_type ? ` (${r.recall_type})` : ''}`,
        detail: r,
      },
    ],
  },
  {
    sql: `select turn_no, reply_message_id, attempts, outcome, lark_code, created_at, finished_at
         from channel_reply_deletions where session_id = $1 order by turn_no desc limit $2`,
    entries: (r) => [
      {
        at: iso(r.finished_at ?? r.created_at),
        kind: 'notice',
        summary: `reply ${r.reply_message_id} of turn ${r.turn_no} recalled too: ${r.outcome ?? 'pending'}${r.lark_code ? ` (Lark code ${r.lark_code})` : ''}`,
        detail: r,
      },
    ],
  },
];

/** Each kind's newest rows of one session, as timeline entries (the statements run one by one). */
export async function conversationTimeline(db: Queryable, sessionId: string): Promise<TimelineEntry[]> {
  const out: TimelineEntry[] = [];
  // One after another on one connection: an inspection is an operator's read, never a burst.
  for (const source of TIMELINE_SOURCES) {
    const { rows } = await db.query<Row>(source.sql, [sessionId, INSPECT_LIMIT]);
    for (const r of rows) out.push(...source.entries(r));
  }
  // Newest first; entries without a time last.
  return out.sort((a, b) => (b.at ?? '').localeCompare(a.at ?? ''));
}

/** The inspection: the matches, and the timeline of the chosen one (or the newest). */
export async function inspect(db: Queryable, installationId: string, q: string, session?: string) {
  const matches = await findConversations(db, installationId, q);
  const chosen = matches.find((m) => m.id === session) ?? matches[0] ?? null;
  return { matches, conversation: chosen, timeline: chosen ? await conversationTimeline(db, chosen.id) : [] };
}
