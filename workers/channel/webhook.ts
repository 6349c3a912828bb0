import type { Pool } from '@neondatabase/serverless';
import { type Context, Hono } from 'hono';
import { Deadline } from '../clock';
import type { AppEnv } from '../context';
import { openPool } from '../db/pool';
import { connectWithin } from '../db/refusal';
import { actorHostStub } from '../effects/actor-host-stub';
import { AppError } from '../errors';
import { INSTALLATION_ID } from '../installations/store';
import { recordRejectedEvent } from '../lark/event-receipts';
import { MessageRecalledEvent, MessageReceiveEvent, normalizeRecall } from '../lark/schemas';
import { type Delivery, openDelivery } from '../lark/verify';
import { limitBody } from '../lib/body-limit';
import { isPgStorable } from '../lib/pg-text';
import { log } from '../log';
import { enforceRateLimit } from '../rate-limit';
import { acceptInboundMessage, unstorableField } from './accept';
import type { InboundMessage, RecordedInput } from './inbound';
import { botMentioned, loadWebhookInstallation } from './mentions';
import { acceptRecall, afterRecallAnswered } from './recall';
import { afterInputAnswered } from './typing-hooks';

/**
 * Lark allows 3 s for the answer (1 s for the URL check); the database gets half. The
 * webhook's own pool gives each one-shot statement that statement_timeout and lock_timeout in
 * the statement's own round trip (db/one-shot.ts), so the autocommit statements are bounded
 * without a `begin`/`set local` round trip.
 */
const WEBHOOK_DB_BUDGET_MS = 1500;
/**
 * One connection per event: the answer's two statements run one after the other, and the
 * Typing Add after the answer rides the same connection (same request, so the same I/O
 * context) instead of opening its own. Connections, not statements, are what the server
 * runs out of under load (bench/suites/50-channel.ts counts them per event).
 */
const WEBHOOK_POOL_MAX = 1;
/**
 * How long a refused connection (server at its backend limit) is retried before the answer
 * is a 503 with Retry-After: inside Lark's 3 s, leaving the statements their own budget.
 */
const WEBHOOK_CONNECT_RETRY_MS = 1200;
export const WEBHOOK_MAX_BODY_BYTES = 256 * 1024;

/**
 * The events the service handles: the Lark app's event subscription should list exactly these
 * (docs/operations.md "Recalled messages", docs/lark.md "Webhook"). Anything else is
 * acknowledged and ignored.
 */
export const SUBSCRIBED_EVENT_TYPES = ['im.message.receive_v1', 'im.message.recalled_v1'] as const;

/**
 * POST /lark/events/:installationId: Lark's event webhook. Verifies (workers/lark/verify.ts),
 * then for a user's im.message.receive_v1 inserts the event_id receipt, records the input,
 * enqueues it on its conversation and registers its typing badge in ONE autocommit
 * statement (accept.ts), and only then answers 200; an im.message.recalled_v1 is recorded
 * the same way (recall.ts). Everything else is acknowledged and ignored. Rejections are 4xx lark_* codes with nothing written; a verified message whose text
 * Postgres cannot store is acknowledged and only its receipt is written, as `rejected`.
 * Over the per-installation rate limit, 429 rate_limited with Retry-After (Lark redelivers later).
 */
export const webhook = new Hono<AppEnv>().post(
  '/:installationId',
  limitBody(WEBHOOK_MAX_BODY_BYTES),
  async (c) => {
    const receivedAtMs = c.var.clock.now();
    const raw = new Uint8Array(await c.req.arrayBuffer());
    const installationId = c.req.param('installationId');
    if (!INSTALLATION_ID.test(installationId))
      throw new AppError('lark_unknown_installation', 'No such Lark installation');
    // No rate limit before the installation's keys are checked: anyone who knows the URL could
    // spend a budget shared with Lark. See handle() for the two budgets.
    // Only the statements get the tight budget; the connect timeout stays the service-wide one
    // (measured: at 2 s, 86 of 128 bench events failed to connect on a loaded 2-core machine).
    // An answer in the isolate's connection budget (db/gate.ts): it passes waiting background
    // work, and waits for a place no longer than it retries a refusal.
    const pool = openPool(c.var.config, {
      statementTimeoutMs: WEBHOOK_DB_BUDGET_MS,
      max: WEBHOOK_POOL_MAX,
      priority: 'answer',
      gateWaitMs: WEBHOOK_CONNECT_RETRY_MS,
    });
    const after: Promise<void>[] = [];
    try {
      await connectWithin(pool, new Deadline(WEBHOOK_CONNECT_RETRY_MS, c.var.clock));
      return await handle(c, pool, installationId, receivedAtMs, raw, after);
    } finally {
      // After the answer the post-answer work (Add) still uses the pool: end it after that.
      const ending = Promise.all(after).then(() => pool.end());
      try {
        c.executionCtx.waitUntil(ending);
      } catch {
        // By design: no execution context (a direct app.request in a test), so end it now.
        await ending;
      }
    }
  },
);

/**
 * Round trips before the answer: the installation (1) and, for a user's message, the one
 * statement that records everything (1): see accept.ts.
 *
 * Two request budgets per installation (docs/operations.md "Rate limits"), both spent after
 * the delivery is opened (an HMAC and a decryption): one for deliveries made with the
 * installation's keys, which only its Lark app can spend, and one for every refused delivery,
 * so a flood of forged requests meets its own limit and never delays the real events.
 */
async function handle(
  c: Context<AppEnv>,
  pool: Pool,
  installationId: string,
  receivedAtMs: number,
  raw: Uint8Array,
  after: Promise<void>[],
) {
  const loaded = await loadWebhookInstallation(pool, c.var.config.SECRET_KEYS, installationId);
  const installation = loaded?.installation;
  let delivery: Delivery;
  try {
    if (!loaded || !installation)
      throw new AppError('lark_unknown_installation', 'No such Lark installation');
    delivery = await openDelivery(raw, c.req.raw.headers, installation, receivedAtMs);
  } catch (err) {
    if (err instanceof AppError) {
      // Over the refusals' budget the answer is 429 and nothing is logged: a flood of forged
      // requests writes at most the budget's worth of warnings.
      await enforceRateLimit(c.env.WEBHOOK_RATE_LIMIT, 'unverified', installationId);
      log.warn('lark_event_rejected', { installationId, code: err.code, requestId: c.var.requestId });
    }
    throw err;
  }
  await enforceRateLimit(c.env.WEBHOOK_RATE_LIMIT, 'installation', installationId);
  if (delivery.kind === 'challenge') return c.json({ challenge: delivery.challenge });
  if (delivery.kind === 'legacy') return c.json({ ok: true, ignored: 'schema_1.0' });

  const { header, event } = delivery.envelope;
  if (header.event_type === 'im.message.recalled_v1')
    return handleRecall(c, pool, installation.id, header.event_id, event, after);
  if (header.event_type !== 'im.message.receive_v1') return c.json({ ok: true, ignored: header.event_type });
  const parsed = MessageReceiveEvent.safeParse(event);
  if (!parsed.success)
    throw new AppError('lark_bad_event', 'im.message.receive_v1 event does not match its schema');
  // Messages from apps (this one included) never start a turn: no loops, no self-replies.
  if (parsed.data.sender.sender_type !== 'user') return c.json({ ok: true, ignored: 'sender_not_user' });

  const inbound: InboundMessage = {
    installation,
    eventId: header.event_id,
    event: parsed.data,
    receivedAtMs,
  };
  // Verified, but Postgres cannot store it: redelivering cannot help, so it is acknowledged and
  // its receipt says rejected (the redeliveries are then duplicates). Logged once, when new.
  const unstorable = unstorableField(inbound);
  if (unstorable) {
    if (!(await recordRejectedEvent(pool, installation.id, header.event_id, header.event_type)))
      return c.json({ ok: true, duplicate: true });
    log.warn('lark_event_unstorable', {
      installationId,
      eventId: header.event_id,
      field: unstorable,
      requestId: c.var.requestId,
    });
    return c.json({ ok: true, rejected: 'unstorable' });
  }
  const mentioned = await botMentioned(pool, loaded, parsed.data.message);
  const outcome = await acceptInboundMessage(pool, inbound, c.var.config.SECRET_KEYS, mentioned);
  if (outcome.kind === 'duplicate') return c.json({ ok: true, duplicate: true });
  // Recorded and acknowledged, never answered: no wake-up, no Add (the statement wrote neither
  // a mailbox message nor a ledger row for it).
  if (outcome.kind === 'unanswered') return c.json({ ok: true, unanswered: outcome.reason });
  after.push(runAfterAnswer(c, outcome.recorded, pool));
  return c.json({ ok: true });
}

/**
 * A user recalled a message (recall.ts): recorded in one statement before the answer; its
 * badge withdrawn and its conversation woken after it. A recall of a message never seen is
 * recorded too: the message, if it comes, is then recorded but never answered.
 */
async function handleRecall(
  c: Context<AppEnv>,
  pool: Pool,
  installationId: string,
  eventId: string,
  event: unknown,
  after: Promise<void>[],
) {
  const parsed = MessageRecalledEvent.safeParse(event);
  if (!parsed.success)
    throw new AppError('lark_bad_event', 'im.message.recalled_v1 event does not match its schema');
  const recall = normalizeRecall(parsed.data);
  const stored = [eventId, recall.messageId, recall.chatId ?? '', recall.recallType ?? ''];
  if (!stored.every(isPgStorable)) {
    if (!(await recordRejectedEvent(pool, installationId, eventId, 'im.message.recalled_v1')))
      return c.json({ ok: true, duplicate: true });
    log.warn('lark_event_unstorable', { installationId, eventId, requestId: c.var.requestId });
    return c.json({ ok: true, rejected: 'unstorable' });
  }
  const outcome = await acceptRecall(pool, installationId, eventId, recall);
  if (outcome.kind === 'duplicate') return c.json({ ok: true, duplicate: true });
  const { dbDone, done } = afterRecallAnswered(
    c.env,
    c.var.config,
    { installationId, messageId: recall.messageId, sessionId: outcome.sessionId },
    pool,
  );
  try {
    c.executionCtx.waitUntil(done);
  } catch {
    // No execution context (a direct app.request in a unit test): the task still runs.
  }
  after.push(dbDone);
  return c.json({ ok: true, recalled: true });
}

/**
 * Runs after the 200, through `executionCtx.waitUntil`, only for a newly recorded input:
 * wakes the conversation's ActorHost (the commit is done, so it sees the input) and lets the
 * ledger send the Typing Add on the request's own pool (still open: the pool ends as soon as
 * the Add's statements settle, without waiting for the wake-up, whose RPC returns only when
 * the host's pump is done). A lost wake-up is recovered by the minute cron's mailbox polling.
 */
function runAfterAnswer(
  c: { env: AppEnv['Bindings']; var: AppEnv['Variables']; executionCtx: Pick<ExecutionContext, 'waitUntil'> },
  recorded: RecordedInput,
  pool: Pool,
): Promise<void> {
  const { sessionId } = recorded.typing;
  const woken = actorHostStub(c.env, sessionId)
    .wake(sessionId)
    .then(
      () => undefined,
      (err: unknown) => log.warn('channel_wake_failed', { sessionId, error: err }),
    );
  // Never throws: it logs its own failures (`typing_add_error`).
  const dbDone = afterInputAnswered(
    c.var.config,
    { input: recorded.typing, registration: recorded.registration },
    pool,
  );
  // Last resort: both parts log their own failures; anything else lands here.
  const task = Promise.all([woken, dbDone]).catch((err: unknown) =>
    log.error('lark_after_answer_failed', { installationId: recorded.typing.installationId, error: err }),
  );
  try {
    c.executionCtx.waitUntil(task);
  } catch {
    // No execution context (a direct app.request in a unit test): the task still runs.
  }
  // What the pool waits for before it ends: the Add's statements, not the wake-up.
  return dbDone.catch(() => undefined);
}
