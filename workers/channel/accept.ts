import type { Pool } from '@neondatabase/serverless';
import type { KeyRing } from '../crypto/sealed';
import { withStatement } from '../db/tx';
import { enqueueCtes } from '../effects/mailbox';
import { settingsCte } from '../installations/settings';
import { callsTodaySql } from '../lark/call-counts';
import { receiptCte } from '../lark/event-receipts';
import type { LarkRoute } from '../lark/rate-limits';
import { isPgStorable } from '../lib/pg-text';
import {
  MAX_LIFETIME_MS,
  prepareRegistration,
  REGISTER_RESULT_COLUMNS,
  type RegisterResultRow,
  registerCtes,
  registrationOutcome,
} from '../typing-ledger';
import type { InputMessage } from './conversation';
import type { InboundMessage, RecordedInput } from './inbound';
import { CONVERSATION_ACTOR, conversationKey, createTimeMs, inputText, sessionIdOf } from './session';
import type { TypingInput } from './typing-hooks';

/** The settings row of the message's installation ($1), its defaults from $26 on. */
const SETTINGS_ROW = settingsCte('settings', '$1', 26);

/** The routes a badge needs (Add, withdrawal, sweep): `quiet` adds none while any is held. */
const REACTION_ROUTES: LarkRoute[] = ['reactions.create', 'reactions.delete', 'reactions.list'];

/**
 * The webhook's decision for one message, from the installation's settings as the statement's
 * own snapshot sees them (installations/settings.ts `settingsCte`): one snapshot decides both
 * halves, so a message is never answered under one value and badged under another.
 * - `answer`: p2p always; a group message under `reply_in_groups = always`, or when the webhook
 *   found the bot's open_id among its mentions ($23; null, unknown, is not a mention). An
 *   unanswered input is still recorded (with `unanswered`, its receipt, its conversation
 *   position), but gets no mailbox message and no ledger row: never a turn, never a badge.
 * - `recalled`: the message was recalled before it arrived (channel/recall.ts): recorded with
 *   `unanswered = 'recalled'`, like an unanswered input (no mailbox message, no ledger row).
 * - `badge`: an answered input's registration, under `typing_badge`: `on`; never for `off`;
 *   for `quiet`, only while no recorded 429 holds any of the app's reaction routes ($25) and
 *   the app's calls today are under `typing_daily_call_budget` (lark/call-counts.ts).
 */
const DECIDE = `${SETTINGS_ROW.sql}, decision as (
  select ($10 <> 'group' or st.reply_in_groups = 'always' or coalesce($23::boolean, false)) as answer,
         case st.typing_badge
           when 'on' then true
           when 'quiet' then
             not exists (select 1 from lark_rate_limits l
                          where l.api_base = $24 and l.app_id = $5 and l.route = any($25::text[])
                            and l.not_before > app_now())
             and (st.typing_daily_call_budget is null
                  or ${callsTodaySql('$24', '$5')} < st.typing_daily_call_budget)
           else false
         end as badge,
         -- A paused installation records and acknowledges its inputs, but badges none (pause.ts).
         st.paused = 'on' as paused,
         -- Recalled before it arrived (recall.ts): recorded, never answered, never badged.
         exists (select 1 from channel_recalled_messages r
                  where r.installation_id = $1 and r.message_id = $8) as recalled
    from settings st
)`;

/**
 * Everything the webhook writes for one event, as ONE autocommit statement (a chain of
 * data-modifying CTEs): the event_id receipt gates all the rest (a duplicate writes nothing);
 * the conversation upsert numbers the input (its row lock orders positions per session until
 * the statement commits); the input row (a Lark message id seen under another event id
 * records nothing further); the actor instance and the `in:<position>` mailbox message
 * (effects/mailbox.ts `enqueueCtes`: the SQL of `ensureInstance` and `enqueueMessage`);
 * and the typing-ledger registration (typing-ledger
 * `registerCtes`: settlement check, random free quota slot, `on conflict do nothing` on the
 * unique partial index, sealed snapshot bound to the client-generated row id); the last two
 * only as the installation's settings decide (DECIDE, read in the same snapshot). All of it
 * commits or none of it does, before the answer, so register-before-Add holds: the Add is
 * sent only for a row this committed statement inserted.
 *
 * Why a CTE chain and not a plpgsql function: the project's rule is one statement when one
 * snapshot suffices, a function when reads must follow locks (the ticket contract,
 * migrations/functions/reaction_tickets.sql, re-reads time and admission after each lock it
 * waits for). Here every decision is made in the statement's one snapshot (the unique indexes
 * and `on conflict` arbitrate the races), so it stays a statement: its SQL changes with the
 * TypeScript that owns each table, and it is one round trip either way (the bench's counting
 * bridge: 8 before → 2 per event, the other being the installation load).
 */
const ACCEPT = `
with ${receiptCte('im.message.receive_v1')}, ${DECIDE}, conv as (
  insert into channel_conversations as c
         (id, installation_id, workspace_id, app_id, chat_id, thread_id, last_position)
  select $3, $1, $4, $5, $6, $7, 1 from receipt
  on conflict (id) do update set last_position = c.last_position + 1, updated_at = app_now()
  returning c.last_position as position, c.context_revision
), input as (
  insert into lark_inbound_messages
         (installation_id, event_id, message_id, chat_id, thread_id, root_id, chat_type,
          sender_open_id, message_type, content, received_at_ms,
          session_id, position, context_revision, message_created_at_ms, unanswered)
  select $1, $2, $8, $6, $7, $9, $10, $11, $12, $13, $14, $3, conv.position, conv.context_revision, $15,
         case when decision.recalled then 'recalled'
              when decision.answer then null else 'not_mentioned' end
    from conv, decision
  on conflict (installation_id, message_id) do nothing
  returning position, context_revision, unanswered
), answered as (
  select position, context_revision from input where unanswered is null
), ${enqueueCtes({
  instanceId: '$3',
  actorType: '$16',
  actorKey: '$17',
  state: `'{}'::jsonb`,
  key: `'in:' || answered.position`,
  payload: `$18::jsonb || jsonb_build_object('position', answered.position, 'contextRevision', answered.context_revision)`,
  from: 'answered',
})}, ${registerCtes({
  id: '$19',
  workspaceId: '$4',
  installationId: '$1',
  appId: '$5',
  sessionId: '$3',
  messageId: '$8',
  position: 'answered.position',
  revision: 'answered.context_revision',
  chatId: '$6',
  createdAtMs: '$15',
  sealed: '$20',
  lifetimeMs: '$21',
  from: 'answered',
  gate: '($22::boolean and (select badge and not paused from decision))',
})}
select exists (select 1 from receipt) as accepted,
       (select position from input) as position,
       (select context_revision from input) as context_revision,
       (select unanswered from input) as unanswered,
       (select badge from decision) as badge,
       (select paused from decision) as paused,
       ${REGISTER_RESULT_COLUMNS}`;

interface AcceptRow extends RegisterResultRow {
  accepted: boolean;
  position: string | null;
  context_revision: string | null;
  unanswered: 'not_mentioned' | 'recalled' | null;
  badge: boolean;
  paused: boolean;
}

/**
 * What the statement did with the event: nothing (a duplicate event, or a Lark message
 * already recorded under another event id); recorded it as an input never to be answered; or
 * recorded it for its conversation, with what the work after the answer needs.
 */
export type AcceptOutcome =
  | { kind: 'duplicate' }
  | { kind: 'unanswered'; reason: 'not_mentioned' | 'recalled' }
  | { kind: 'recorded'; recorded: RecordedInput };

/**
 * The first field of a verified event whose text Postgres cannot store (U+0000 or a lone
 * surrogate, lib/pg-text.ts), or null: every string the accept statement writes, the text
 * taken out of `content` included (JSON escapes can put either in it). The webhook checks
 * this before accepting, and records the event as rejected instead.
 */
export function unstorableField(inbound: InboundMessage): string | null {
  const { message, sender } = inbound.event;
  const stored: Record<string, string | undefined> = {
    event_id: inbound.eventId,
    message_id: message.message_id,
    chat_id: message.chat_id,
    thread_id: message.thread_id,
    root_id: message.root_id,
    chat_type: message.chat_type,
    sender_open_id: sender.sender_id?.open_id,
    message_type: message.message_type,
    content: message.content,
    text: inputText(message.message_type, message.content),
  };
  for (const [field, value] of Object.entries(stored))
    if (value !== undefined && !isPgStorable(value)) return field;
  return null;
}

/**
 * Deadlocks and serialization failures are safe to retry: a failed statement committed
 * nothing. Retried through `withStatement`, so every retry is logged (`db_tx_retry`) and seen
 * by the test harness (a deadlock no test declared fails it), and only inside the webhook's
 * database budget.
 */
const RETRY = { budgetMs: 1500, maxAttempts: 2 };

/** The statement's parameters by name, in the order of their `$n` (ACCEPT_PARAM_ORDER). */
interface AcceptParams {
  installationId: string;
  eventId: string;
  sessionId: string;
  workspaceId: string;
  appId: string;
  chatId: string;
  threadId: string | null;
  messageId: string;
  rootId: string | null;
  chatType: string;
  senderOpenId: string | null;
  messageType: string;
  content: string;
  receivedAtMs: number;
  messageCreatedAtMs: number | null;
  actorType: string;
  actorKey: string;
  payload: string;
  ledgerId: string | null;
  sealed: string | null;
  lifetimeMs: number;
  register: boolean;
  botMentioned: boolean | null;
  apiBase: string;
  reactionRoutes: LarkRoute[];
}

/** `$1` is the first name, `$25` the last; the settings defaults follow from `$26`. */
const ACCEPT_PARAM_ORDER = [
  'installationId',
  'eventId',
  'sessionId',
  'workspaceId',
  'appId',
  'chatId',
  'threadId',
  'messageId',
  'rootId',
  'chatType',
  'senderOpenId',
  'messageType',
  'content',
  'receivedAtMs',
  'messageCreatedAtMs',
  'actorType',
  'actorKey',
  'payload',
  'ledgerId',
  'sealed',
  'lifetimeMs',
  'register',
  'botMentioned',
  'apiBase',
  'reactionRoutes',
] as const satisfies readonly (keyof AcceptParams)[];

// Every parameter has its place: a name missing from the order fails the typecheck here.
const everyParamPlaced: Exclude<keyof AcceptParams, (typeof ACCEPT_PARAM_ORDER)[number]> extends never
  ? true
  : never = true;
void everyParamPlaced;

type Registration = Awaited<ReturnType<typeof prepareRegistration>>;

/** What the statement writes for one message, by name. */
function acceptParams(
  inbound: InboundMessage,
  prep: Registration,
  botMentioned: boolean | null,
  at: { sessionId: string; threadId: string | null; messageCreatedAtMs: number | null },
): AcceptParams {
  const { installation, event, eventId } = inbound;
  const { message, sender } = event;
  const senderOpenId = sender.sender_id?.open_id ?? null;
  const text = inputText(message.message_type, message.content);
  const payload: Omit<InputMessage, 'position' | 'contextRevision'> = {
    session: {
      installationId: installation.id,
      workspaceId: installation.workspaceId,
      appId: installation.appId,
      chatId: message.chat_id,
      threadId: at.threadId,
    },
    messageId: message.message_id,
    senderOpenId,
    text,
    createdAtMs: at.messageCreatedAtMs,
  };
  const key = { installationId: installation.id, chatId: message.chat_id, threadId: at.threadId };
  return {
    installationId: installation.id,
    eventId,
    sessionId: at.sessionId,
    workspaceId: installation.workspaceId,
    appId: installation.appId,
    chatId: message.chat_id,
    threadId: at.threadId,
    messageId: message.message_id,
    rootId: message.root_id ?? null,
    chatType: message.chat_type,
    senderOpenId,
    messageType: message.message_type,
    content: message.content,
    receivedAtMs: inbound.receivedAtMs,
    messageCreatedAtMs: at.messageCreatedAtMs,
    actorType: CONVERSATION_ACTOR,
    actorKey: conversationKey(key),
    payload: JSON.stringify(payload),
    ledgerId: prep.stale ? null : prep.id,
    sealed: prep.stale ? null : prep.sealed,
    lifetimeMs: MAX_LIFETIME_MS,
    register: !prep.stale,
    botMentioned,
    apiBase: installation.apiBase.replace(/\/+$/, ''),
    reactionRoutes: REACTION_ROUTES,
  };
}

/** The settings and the ledger's answer, as the statement's row and the prepared registration say. */
function registrationOf(
  row: AcceptRow,
  prep: Registration,
  inbound: InboundMessage,
): RecordedInput['registration'] {
  // No badge by the installation's setting is no skip of the ledger's (nothing to warn about).
  if (prep.stale || row.paused || !row.badge) return { sendAdd: false, ledgerId: null };
  const outcome = registrationOutcome(row, prep.id, inbound.event.message.message_id, inbound.installation);
  return outcome.kind === 'registered'
    ? { sendAdd: true, ledgerId: outcome.id }
    : { sendAdd: false, ledgerId: null };
}

/**
 * Records one verified `im.message.receive_v1` in one round trip (autocommit). `botMentioned`
 * is what the webhook found about the bot among the message's mentions (channel/mentions.ts).
 * Throws on any database error: nothing was written, no Add may be sent, and the 5xx makes
 * Lark retry.
 */
export async function acceptInboundMessage(
  pool: Pick<Pool, 'query'>,
  inbound: InboundMessage,
  keys: KeyRing,
  botMentioned: boolean | null = null,
): Promise<AcceptOutcome> {
  const { installation, event } = inbound;
  const { message } = event;
  const threadId = message.thread_id ?? null;
  const sessionId = sessionIdOf({ installationId: installation.id, chatId: message.chat_id, threadId });
  const messageCreatedAtMs = createTimeMs(message.create_time);
  const prep = await prepareRegistration(keys, {
    installation,
    messageCreatedAtMs,
    receivedAtMs: inbound.receivedAtMs,
  });
  const named = acceptParams(inbound, prep, botMentioned, { sessionId, threadId, messageCreatedAtMs });
  const params = [...ACCEPT_PARAM_ORDER.map((name) => named[name]), ...SETTINGS_ROW.params];
  const { rows } = await withStatement(RETRY, () => pool.query<AcceptRow>(ACCEPT, params));
  const row = rows[0]!;
  if (!row.accepted || row.position === null || row.context_revision === null) return { kind: 'duplicate' };
  if (row.unanswered !== null) return { kind: 'unanswered', reason: row.unanswered };
  const typing: TypingInput = {
    sessionId,
    installationId: installation.id,
    workspaceId: installation.workspaceId,
    appId: installation.appId,
    chatId: message.chat_id,
    threadId,
    messageId: message.message_id,
    messageCreatedAtMs,
    position: Number(row.position),
    contextRevision: Number(row.context_revision),
    receivedAtMs: inbound.receivedAtMs,
    installation,
  };
  return { kind: 'recorded', recorded: { typing, registration: registrationOf(row, prep, inbound) } };
}
