import type { Pool } from '@neondatabase/serverless';
import { agentFor } from '../agents';
import { Deadline } from '../clock';
import { onPool } from '../db/pool';
import type { ClaimedEffect, EffectExecutor, EffectRunContext } from '../effects/registry';
import type { Config } from '../env';
import { AppError } from '../errors';
import { readSettings } from '../installations/settings';
import { type Installation, loadInstallation } from '../installations/store';
import { durableErrorLog } from '../lark/api-errors';
import { LarkClient } from '../lark/client';
import { LarkApiError, RATE_LIMITED_CODE } from '../lark/errors';
import { durableRateGate } from '../lark/rate-limits';
import { log } from '../log';
import { metric, since } from '../metrics';
import { type CardReplyInput, cardReply, finishInterruptedCard } from './card-reply';
import { REPLY_KIND, type ReplyArgs, type ReplyResult, rerunOf, SETTLED_KIND } from './conversation';
import { findCard } from './reply-cards';
import { claimReplyPost, recalledBeforeAsking, recalledInputs } from './reply-claim';
import { held, notDelivered, recalled } from './reply-results';
import { afterTurnSettled, type TurnSettlement } from './typing-hooks';

/** Lark's part of a reply run (token + post, with one token refresh) gets this much. */
export const DELIVERY_BUDGET_MS = 8000;

/**
 * Lark deduplicates a reply `uuid` for one hour (docs/channel.md). A replacement generation
 * (one after an attempt that may have posted) starting later than this after the turn began
 * does not post: Lark would no longer recognize the uuid and a second reply would appear. The
 * margin covers the first attempt's own duration and clock differences.
 */
export const REPLY_UUID_SAFE_MS = 50 * 60_000;

/** The reply's Lark `uuid` (≤ 50 chars): the turn's delivery key, an effect id. */
export function deliveryUuid(args: Pick<ReplyArgs, 'deliveryKey'>, effectId: string): string {
  return args.deliveryKey ?? effectId;
}

export interface ChannelDeps {
  config: () => Config;
  /** The Worker's `AGENT` service binding, when it has one (an in-account agent Worker). */
  agentBinding?: () => Pick<Fetcher, 'fetch'> | undefined;
  /** Overrides fetch for the Lark client (tests, benchmarks). */
  fetch?: typeof fetch;
}

/**
 * `channel.reply`: asks the agent, then posts the reply to the anchor message with a `uuid`
 * derived from the turn's first effect id, so any later generation (or a retried post after
 * a lost response) is deduplicated by Lark. Transient failures throw (the actor starts a
 * replacement generation); answers that retrying cannot change complete with an outcome.
 */
export function replyExecutor(deps: ChannelDeps): EffectExecutor {
  return {
    kind: REPLY_KIND,
    // Every generation posts with the turn's one uuid (deliveryUuid), which Lark deduplicates:
    // a restarted host may run it again while its old incarnation's run is still in flight.
    idempotentByKey: true,
    get timeoutMs() {
      return deps.config().AGENT_TIMEOUT_MS + DELIVERY_BUDGET_MS + 2000;
    },
    async run(effect: ClaimedEffect, signal: AbortSignal, ctx?: EffectRunContext): Promise<ReplyResult> {
      const args = effect.args as ReplyArgs;
      const config = deps.config();
      const db = <T>(use: (q: Pool) => Promise<T>) => onPool(config, ctx?.pool, use);
      const { installation, pastDedup, replyMode } = await db((pool) => readTurnContext(pool, config, args));
      if (!installation) return { outcome: 'failed', replyMessageId: null, reason: 'installation_gone' };
      const app = { apiBase: installation.apiBase, appId: installation.appId };
      const gate = <T>(use: (g: ReturnType<typeof durableRateGate>) => Promise<T>) =>
        db((pool) => use(durableRateGate(pool, app)));
      // The reply route honours Lark's 429 holds as the reaction routes do: while one is
      // recorded, the agent is not asked and nothing is sent. The turn tries again at the
      // reset with the turn's delivery key, so that run meets the deadline check above.
      const heldMs = await gate((g) => g.heldForMs('reply'));
      if (heldMs > 0) return held(args, heldMs);
      // Every input recalled already (and no earlier generation claimed the post): the agent
      // is not asked. The decision that counts is the claim right before the post, below.
      if (await db((pool) => recalledBeforeAsking(pool, args))) return recalled(args);
      const ask = agentAsker(config, deps, await db((pool) => shownToAgent(pool, args)), signal);
      const lark = replyClient(deps, config, installation, gate, ctx);
      const claim = () => db((pool) => claimReplyPost(pool, args));
      const uuid = deliveryUuid(args, effect.id);
      let text: string | null = null;
      if (replyMode === 'card_stream') {
        // A card is posted as the agent starts answering (card-reply.ts): the claim comes first.
        const claimed = await claim();
        if (claimed.kind === 'recalled') return recalled(args);
        const anchored = { ...args, anchorMessageId: claimed.anchorMessageId };
        const result = await cardReply({ args: anchored, lark, db, uuid, pastDedup, signal, ask });
        if (!('fallbackText' in result)) return result;
        text = result.fallbackText;
      }
      // At most one reply per turn outranks an answer: an earlier generation may have posted,
      // and Lark's uuid dedup no longer covers it (found by the chaos run after an outage).
      if (pastDedup) return pastDedupWindow(args);
      text ??= (await ask()).text;
      // The post decision, under the turn row's lock against a racing recall (reply-claim.ts):
      // it also names the anchor, the newest input not recalled.
      const claimed = await claim();
      if (claimed.kind === 'recalled') return recalled(args);
      return postText(lark, claimed.anchorMessageId, args, text, uuid, signal);
    },
  };
}

/** What a reply run reads before it acts: the installation, the uuid window, the reply mode. */
async function readTurnContext(pool: Pool, config: Config, args: ReplyArgs) {
  return {
    installation: await loadInstallation(pool, config.SECRET_KEYS, args.session.installationId),
    // Any later run of the turn (a replacement, or a run retried after a rate-limit hold:
    // both carry the turn's delivery key) ends once the turn is past its deadline.
    pastDedup: args.deliveryKey !== null && (await turnOlderThan(pool, args, REPLY_UUID_SAFE_MS)),
    replyMode: await turnReplyMode(
      pool,
      args,
      (await readSettings(pool, args.session.installationId)).reply_mode,
    ),
  };
}

/** The turn as the agent sees it: a recalled input is not shown (its user took it back). */
async function shownToAgent(pool: Pool, args: ReplyArgs): Promise<ReplyArgs> {
  const gone = await recalledInputs(pool, args);
  return gone.size === 0 ? args : { ...args, inputs: args.inputs.filter((i) => !gone.has(i.messageId)) };
}

function pastDedupWindow(args: ReplyArgs): ReplyResult {
  log.warn('channel_reply_past_dedup_window', {
    sessionId: args.sessionId,
    turnNo: args.turnNo,
    generation: args.generation,
  });
  return { outcome: 'failed', replyMessageId: null, reason: 'uuid_window_passed' };
}

/** Asks the turn's agent, within AGENT_TIMEOUT_MS; `onText` sees a streamed answer grow. */
function agentAsker(config: Config, deps: ChannelDeps, args: ReplyArgs, signal: AbortSignal) {
  const agent = agentFor(config, deps.agentBinding?.());
  const of = rerunOf(args.inputs);
  return (onText?: (textSoFar: string) => void) =>
    measured(
      Date.now(),
      agent.reply(
        {
          sessionId: args.sessionId,
          turnNo: args.turnNo,
          generation: args.generation,
          contextRevision: args.contextRevision,
          inputs: args.inputs.map((i) => ({
            position: i.position,
            messageId: i.messageId,
            senderOpenId: i.senderOpenId,
            text: i.text,
          })),
          // A re-run says so (in-process agents: the dev echo agent's failure on demand).
          ...(of === null ? {} : { rerunOf: of }),
        },
        AbortSignal.any([signal, AbortSignal.timeout(config.AGENT_TIMEOUT_MS)]),
        onText,
      ),
    );
}

/** The text reply: one post with the turn's uuid. Transient failures throw (a replacement runs). */
async function postText(
  lark: LarkClient,
  anchorMessageId: string,
  args: ReplyArgs,
  text: string,
  uuid: string,
  signal: AbortSignal,
): Promise<ReplyResult> {
  try {
    const sent = await lark.replyMessage(
      anchorMessageId,
      { content: JSON.stringify({ text }), uuid },
      { deadline: new Deadline(DELIVERY_BUDGET_MS), signal },
    );
    return { outcome: 'delivered', replyMessageId: sent.message_id };
  } catch (err) {
    // Rate limited (answered 429, or held back by a reset recorded meanwhile): Lark posted
    // nothing, so the same generation runs again at the reset instead of a replacement.
    if (err instanceof LarkApiError && (err.httpStatus === 429 || err.code === RATE_LIMITED_CODE))
      return held(args, (err.retryAfterSeconds ?? 1) * 1000);
    if (!(err instanceof LarkApiError) || err.kind === 'retryable') throw err;
    return notDelivered(args, err);
  }
}

/**
 * What a channel after-turn effect's run works with (failure notice, reply deletion): the
 * config, the database (the host's pool when it lends one), its installation and a Lark client
 * for it (channelLark).
 */
function channelRun(deps: ChannelDeps, ctx: EffectRunContext | undefined) {
  const config = deps.config();
  const db = <T>(use: (q: Pool) => Promise<T>) => onPool(config, ctx?.pool, use);
  return {
    config,
    db,
    installation: (id: string) => db((q) => loadInstallation(q, config.SECRET_KEYS, id)),
    lark: (installation: Installation) => channelLark(deps, config, installation, ctx),
  };
}

export type ChannelRun = ReturnType<typeof channelRun>;

/**
 * A channel after-turn effect's executor: `kind` and its run policy, and `run`, given the
 * effect's arguments and what its run works with (channelRun).
 */
export function channelExecutor<A, R>(
  deps: ChannelDeps,
  policy: Pick<EffectExecutor, 'kind' | 'timeoutMs' | 'idempotentByKey'>,
  run: (args: A, on: ChannelRun) => Promise<R>,
): EffectExecutor {
  return {
    ...policy,
    run: (effect, _signal, ctx?: EffectRunContext) => run(effect.args as A, channelRun(deps, ctx)),
  };
}

/** A Lark client for the channel's after-turn work (settlement, failure notice): replyClient on its own gate. */
export function channelLark(
  deps: ChannelDeps,
  config: Config,
  installation: Installation,
  ctx: EffectRunContext | undefined,
): LarkClient {
  const app = { apiBase: installation.apiBase, appId: installation.appId };
  return replyClient(
    deps,
    config,
    installation,
    (use) => onPool(config, ctx?.pool, (q) => use(durableRateGate(q, app))),
    ctx,
  );
}

/** The reply's Lark client: the durable rate gate, and the console's last Open API error. */
function replyClient(
  deps: ChannelDeps,
  config: Config,
  installation: Installation,
  gate: <T>(use: (g: ReturnType<typeof durableRateGate>) => Promise<T>) => Promise<T>,
  ctx: EffectRunContext | undefined,
): LarkClient {
  return new LarkClient(
    { baseUrl: installation.apiBase, appId: installation.appId, appSecret: installation.appSecret },
    {
      fetch: deps.fetch,
      // A 429 on the post records its reset for every isolate (lark/rate-limits.ts).
      rateGate: {
        heldForMs: (route) => gate((g) => g.heldForMs(route)),
        admit: (route) => gate((g) => g.admit(route)),
        limited: (route, seconds) => gate((g) => g.limited(route, seconds)),
      },
      // The console's last Open API error, only when a call failed: on the host's connection
      // when the runner gave one, else its own short connection.
      errorLog: {
        failed: (route, err) =>
          onPool(config, ctx?.pool, (pool) =>
            durableErrorLog(pool, { apiBase: installation.apiBase, appId: installation.appId }).failed(
              route,
              err,
            ),
          ).catch((error: unknown) => log.warn('lark_api_error_record_failed', { route, error })),
      },
    },
  );
}

/** The agent's answer time (agent_ms), labelled with its outcome: ok or the failure's code. */
async function measured<T>(started: number, answer: Promise<T>): Promise<T> {
  try {
    const value = await answer;
    metric('agent_ms', since(started), 'ok');
    return value;
  } catch (err) {
    metric('agent_ms', since(started), err instanceof AppError ? err.code : 'error');
    throw err;
  }
}

/**
 * The turn's reply mode: the one its first run recorded, else `setting`, recorded now (one
 * statement; the first writer wins). Every generation of a turn posts with its one uuid, so
 * answering in another mode than an earlier generation would let Lark's dedup return that
 * generation's message as this one's (migrations/0050_baseline_channel.sql).
 */
async function turnReplyMode(
  pool: Pick<Pool, 'query'>,
  args: Pick<ReplyArgs, 'sessionId' | 'turnNo'>,
  setting: 'text' | 'card_stream',
): Promise<'text' | 'card_stream'> {
  const { rows } = await pool.query<{ reply_mode: 'text' | 'card_stream' }>(
    `update channel_turns set reply_mode = coalesce(reply_mode, $3)
      where session_id = $1 and turn_no = $2
      returning reply_mode`,
    [args.sessionId, args.turnNo, setting],
  );
  return rows[0]?.reply_mode ?? setting;
}

/** Whether the turn began more than `ms` ago in database time (its `channel_turns.started_at`). */
async function turnOlderThan(
  pool: Pick<Pool, 'query'>,
  args: Pick<ReplyArgs, 'sessionId' | 'turnNo'>,
  ms: number,
): Promise<boolean> {
  const { rows } = await pool.query<{ old: boolean }>(
    `select started_at <= app_now() - $3 * interval '1 millisecond' as old
       from channel_turns where session_id = $1 and turn_no = $2`,
    [args.sessionId, args.turnNo, ms],
  );
  return rows[0]?.old === true;
}

/**
 * A streamed card the turn's writers left unfinished, finished (card-reply.ts): by the turn's
 * settlement, and by the minute sweep for a settlement that could not (card-sweep.ts).
 */
export async function finishLeftoverCard(
  deps: ChannelDeps,
  config: Config,
  args: Pick<TurnSettlement, 'sessionId' | 'turnNo' | 'installationId' | 'outcome'>,
  ctx?: EffectRunContext,
) {
  const turn = { sessionId: args.sessionId, turnNo: args.turnNo };
  const db: CardReplyInput['db'] = (use) => onPool(config, ctx?.pool, use);
  const card = await db((q) => findCard(q, turn));
  if (!card || card.finished) return;
  const installation = await db((pool) => loadInstallation(pool, config.SECRET_KEYS, args.installationId));
  // The installation is gone: so are its credentials, and nothing can reach its cards.
  if (!installation) return;
  const lark = channelLark(deps, config, installation, ctx);
  await finishInterruptedCard({
    lark,
    db,
    turn,
    delivered: args.outcome === 'delivered',
  });
}

/** `channel.turn-settled`: the after-commit half of settlement (badge withdrawal, a card left streaming). */
export function settledExecutor(deps: ChannelDeps): EffectExecutor {
  return {
    kind: SETTLED_KIND,
    timeoutMs: 15_000,
    // The typing ledger withdraws each badge once whoever runs it (its rows serialize the
    // withdrawal): a second run finds the badge settled and deletes nothing.
    idempotentByKey: true,
    async run(effect: ClaimedEffect, _signal: AbortSignal, ctx?: EffectRunContext) {
      const args = effect.args as TurnSettlement;
      const config = deps.config();
      // Two independent halves: a card left streaming is finished whatever the badges do, and
      // the badges are withdrawn whatever the card does. Either failing retries the effect.
      const [card, badges] = await Promise.allSettled([
        finishLeftoverCard(deps, config, args, ctx),
        afterTurnSettled(config, args, ctx?.pool),
      ]);
      if (card.status === 'rejected') throw card.reason;
      if (badges.status === 'rejected') throw badges.reason;
      return { ok: true };
    },
  };
}
