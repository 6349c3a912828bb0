import type { ActorContext, ActorEvent, ActorType } from '../effects/registry';
import { applyBacklog, onResume } from './backlog';
import { localeOf } from './notices';
import { claimTurnStart, RESUME_KEY_PREFIX, type ResumePayload, readHold } from './pause';
import { RECALL_KEY_PREFIX, type RecallPayload } from './recall';
import { deleteAfterRecall, deleteAtSettlement } from './reply-deletion';
import { CONVERSATION_ACTOR } from './session';
import { insertTurn, replaceTurnEffect, settleTurnRow } from './turns';
import {
  type ConversationSettings,
  type ConversationState,
  FAILURE_NOTICE_KIND,
  type FailureNoticeArgs,
  type InputMessage,
  type ReplyArgs,
  type ReplyResult,
  type RunningTurn,
  type TurnInput,
} from './types';
import {
  markTurnInputsTasked,
  settleTurnInputs,
  type TurnOutcome,
  type TurnSettlement,
} from './typing-hooks';

export type * from './types';

export const REPLY_KIND = 'channel.reply';
export const SETTLED_KIND = 'channel.turn-settled';
/** Generations of one turn's reply (first run + replacements after failure or recovery). */
export const MAX_GENERATIONS = 3;
/** At most this many inputs per turn; the rest wait for the next one. */
export const MAX_TURN_INPUTS = 50;

const initial = (): ConversationState => ({
  session: null,
  pending: [],
  firstPendingAtMs: null,
  dueAtMs: null,
  turnNo: 0,
  turn: null,
  lastOutcome: null,
  heldResume: null,
});

type Ctx = ActorContext;

/** Splits the runtime's `effect:<id>:<what>` keys. */
function runtimeKey(key: string): { effectId: string; what: string } | null {
  const m = /^effect:([0-9a-f-]{36}):(recovery|completed|failed|check:\d+)$/.exec(key);
  return m ? { effectId: m[1]!, what: m[2]! } : null;
}

function emitReply(ctx: Ctx, s: ConversationState, t: Omit<RunningTurn, 'current'>, delayMs: number) {
  const args: ReplyArgs = {
    sessionId: ctx.instanceId,
    session: s.session!,
    turnNo: t.turnNo,
    generation: t.generation,
    contextRevision: t.contextRevision,
    anchorMessageId: t.anchorMessageId,
    // The first run's own effect id is its key (unknown until emitted: ''); every later run
    // of the turn (a replacement, or a run retried after a rate-limit hold) reuses it.
    deliveryKey: t.deliveryKey === '' ? null : t.deliveryKey,
    inputs: t.inputs,
  };
  // One attempt per generation: the actor owns retries (replacement generations with the
  // same delivery key), so a failure or a dead process always comes back as a message.
  return ctx.emit(REPLY_KIND, args, {
    recovery: { operation: 'settle-turn' },
    notifyOnComplete: true,
    maxAttempts: 1,
    delayMs,
  });
}

/** The failed turn a new turn re-runs, when it covers a re-run's inputs (rerun.ts). */
export function rerunOf(inputs: TurnInput[]): number | null {
  const of = inputs.flatMap((i) => (typeof i.rerunOf === 'number' ? [i.rerunOf] : []));
  return of.length > 0 ? Math.max(...of) : null;
}

/** Flush: the pending inputs (up to MAX_TURN_INPUTS) become one turn with one reply. */
function startTurn(s: ConversationState, ctx: Ctx, settings: ConversationSettings): ConversationState {
  const inputs = s.pending.slice(0, MAX_TURN_INPUTS);
  const rest = s.pending.slice(MAX_TURN_INPUTS);
  const anchor = inputs[inputs.length - 1]!;
  const base = {
    turnNo: s.turnNo + 1,
    contextRevision: anchor.contextRevision,
    inputs,
    cutoffPosition: anchor.position,
    anchorMessageId: anchor.messageId,
    generation: 1,
    deliveryKey: '',
  };
  const current = emitReply(ctx, s, base, 0);
  const turn: RunningTurn = { ...base, deliveryKey: current.effectId, current };
  const sessionId = ctx.instanceId;
  const installationId = s.session!.installationId;
  ctx.inCommit(async (tx) => {
    // First: serialized against a pause (pause.ts). A pause that committed since the handler
    // read the hold makes this throw, and the event is handled again, starting nothing.
    await claimTurnStart(tx, installationId, sessionId);
    await insertTurn(tx, {
      sessionId,
      turnNo: turn.turnNo,
      contextRevision: turn.contextRevision,
      firstPosition: inputs[0]!.position,
      cutoffPosition: turn.cutoffPosition,
      inputCount: inputs.length,
      anchorMessageId: turn.anchorMessageId,
      deliveryKey: turn.deliveryKey,
      effectId: current.effectId,
      rerunOf: rerunOf(inputs),
    });
    // Same fenced commit: the turn's inputs now have a task, so the ledger's two-minute
    // taskless expiry leaves their badges alone until this turn's terminal settlement.
    await markTurnInputsTasked(tx, {
      sessionId,
      contextRevision: turn.contextRevision,
      cutoffPosition: turn.cutoffPosition,
    });
  });
  const next: ConversationState = {
    ...s,
    turnNo: turn.turnNo,
    turn,
    pending: rest,
    firstPendingAtMs: null,
    dueAtMs: null,
  };
  if (rest.length > 0) {
    next.firstPendingAtMs = ctx.nowMs;
    next.dueAtMs = ctx.nowMs + settings.debounceMs;
  }
  return next;
}

/**
 * The turn's reply as a new effect after `delayMs`. A replacement (after a failure or a
 * recovery) is the next generation; a run Lark's rate limit held before anything was posted
 * keeps its generation (`sameGeneration`), so it counts against no MAX_GENERATIONS.
 */
function replace(s: ConversationState, ctx: Ctx, delayMs: number, sameGeneration = false): ConversationState {
  const t = s.turn!;
  const generation = sameGeneration ? t.generation : t.generation + 1;
  const current = emitReply(ctx, s, { ...t, generation }, delayMs);
  const sessionId = ctx.instanceId;
  ctx.inCommit((tx) => replaceTurnEffect(tx, sessionId, t.turnNo, generation, current.effectId));
  // The host runs due effects when it wakes; the timer is that wake-up.
  ctx.setTimer(ctx.nowMs + delayMs);
  return { ...s, turn: { ...t, generation, current } };
}

/** Terminal: outcome and ledger settlement in this commit; badge withdrawal as an effect. */
function settle(
  s: ConversationState,
  ctx: Ctx,
  outcome: TurnOutcome,
  replyMessageId: string | null,
): ConversationState {
  const t = s.turn!;
  const session = s.session!;
  const settlement: TurnSettlement = {
    sessionId: ctx.instanceId,
    installationId: session.installationId,
    workspaceId: session.workspaceId,
    appId: session.appId,
    turnNo: t.turnNo,
    contextRevision: t.contextRevision,
    cutoffPosition: t.cutoffPosition,
    positions: t.inputs.map((i) => i.position),
    messageIds: t.inputs.map((i) => i.messageId),
    anchorMessageId: t.anchorMessageId,
    outcome,
    replyMessageId,
  };
  ctx.inCommit(async (tx) => {
    if (await settleTurnRow(tx, settlement.sessionId, t.turnNo, outcome, replyMessageId))
      await settleTurnInputs(tx, settlement);
  });
  ctx.emit(SETTLED_KIND, settlement, { maxAttempts: 3 });
  // The turn's language, for its failure notice (a streamed card records its own).
  const locale = localeOf(t.inputs.map((i) => i.text));
  // A turn that failed (retired included: no generation answered) may owe its user a notice;
  // the installation's `failure_notice` decides when it runs (failure-notice.ts). Never for a
  // delivered turn, nor one whose anchor is gone (nothing to put a notice on).
  if (outcome === 'failed' || outcome === 'retired') {
    const notice: FailureNoticeArgs = {
      sessionId: settlement.sessionId,
      installationId: session.installationId,
      turnNo: t.turnNo,
      anchorMessageId: t.anchorMessageId,
      deliveryKey: t.deliveryKey,
      locale,
    };
    ctx.emit(FAILURE_NOTICE_KIND, notice, { maxAttempts: 5 });
  }
  // Wake at once: runs the settled effect, and the next turn if its debounce is already due.
  ctx.setTimer(ctx.nowMs);
  const next: ConversationState = { ...s, turn: null, lastOutcome: { turnNo: t.turnNo, outcome } };
  // A resume arrived while this turn ran: its backlog choice applies now.
  return s.heldResume ? applyBacklog(next, ctx, s.heldResume, MAX_TURN_INPUTS) : next;
}

function onInput(s: ConversationState, msg: InputMessage, ctx: Ctx, settings: ConversationSettings) {
  // A re-run's copy of an input (rerun.ts) is behind every cutoff by design: it waits for the
  // running turn's end like any input instead of being taken for one that turn covers.
  const covered = msg.rerunOf === undefined && (s.turn?.cutoffPosition ?? 0) >= msg.position;
  const known = covered || s.pending.some((p) => p.position === msg.position);
  if (known) return s;
  const { session, ...input } = msg;
  const first = s.firstPendingAtMs ?? ctx.nowMs;
  const dueAtMs = Math.min(ctx.nowMs + settings.debounceMs, first + settings.maxDebounceMs);
  const pending = [...s.pending, input].sort((a, b) => a.position - b.position);
  // During a turn the timer is left alone: the turn's end re-arms it for these inputs.
  if (!s.turn) ctx.setTimer(dueAtMs);
  return { ...s, session: s.session ?? session, pending, firstPendingAtMs: first, dueAtMs };
}

async function onTimer(
  s: ConversationState,
  ctx: Ctx,
  settings: ConversationSettings,
): Promise<ConversationState> {
  if (s.turn || s.pending.length === 0) return s;
  if (s.dueAtMs !== null && s.dueAtMs > ctx.nowMs) {
    ctx.setTimer(s.dueAtMs);
    return s;
  }
  // Paused (or a resume's choice not applied yet): the inputs wait, with no timer; the
  // resume's message wakes the conversation (backlog.ts).
  const installationId = s.session!.installationId;
  if (await ctx.read((db) => readHold(db, installationId, ctx.instanceId))) return s;
  return startTurn(s, ctx, settings);
}

async function onRuntime(
  s: ConversationState,
  key: { effectId: string; what: string },
  payload: unknown,
  ctx: Ctx,
): Promise<ConversationState> {
  // The one guard: only the running turn's current generation may move the turn.
  if (!s.turn || s.turn.current.effectId !== key.effectId) return s;
  if (key.what === 'completed') {
    const r = ((payload as { result?: ReplyResult }).result ?? {}) as Partial<ReplyResult>;
    // Lark's rate limit held the reply (nothing posted): the same generation again at the
    // reset; the executor ends the turn once it is past its deadline.
    if (r.outcome === 'held') return replace(s, ctx, Math.max(1000, Number(r.retryAfterMs) || 1000), true);
    const outcome: TurnOutcome =
      r.outcome === 'delivered' || r.outcome === 'anchor_gone' || r.outcome === 'recalled'
        ? r.outcome
        : 'failed';
    const replyMessageId = r.replyMessageId ?? null;
    // Every input recalled after the post was claimed: under `recall_reply: on` the reply goes too.
    if (outcome === 'delivered' && replyMessageId) {
      const t = s.turn;
      await deleteAtSettlement(ctx, s.session!.installationId, {
        turnNo: t.turnNo,
        contextRevision: t.contextRevision,
        firstPosition: t.inputs[0]!.position,
        cutoffPosition: t.cutoffPosition,
        replyMessageId,
      });
    }
    return settle(s, ctx, outcome, replyMessageId);
  }
  if (key.what === 'failed') {
    if (s.turn.generation >= MAX_GENERATIONS) return settle(s, ctx, 'failed', null);
    return replace(s, ctx, 1000 * 2 ** (s.turn.generation - 1));
  }
  if (key.what === 'recovery') {
    // The process died: it may or may not have posted. The replacement reuses the delivery
    // key, so Lark keeps at most one reply; after the last generation the turn is retired.
    if (s.turn.generation >= MAX_GENERATIONS) return settle(s, ctx, 'retired', null);
    return replace(s, ctx, 0);
  }
  return s; // check answers: status never moves the turn
}

/**
 * A user recalled one of this conversation's inputs (recall.ts). Its badge is the ledger's
 * (withdrawn by the webhook after its answer); a running turn decides at its post claim
 * (reply-claim.ts); what is left is a reply already delivered (reply-deletion.ts). A pending
 * input stays pending: its turn, if every input of it is recalled, ends `recalled` unposted.
 */
async function onRecall(s: ConversationState, p: RecallPayload, ctx: Ctx): Promise<ConversationState> {
  const position = Number(p?.position);
  const contextRevision = Number(p?.contextRevision);
  if (!p?.installationId || !Number.isSafeInteger(position) || !Number.isSafeInteger(contextRevision))
    return s;
  await deleteAfterRecall(ctx, p.installationId, { position, contextRevision });
  return s;
}

/**
 * The conversation actor's instance retention (issue 35 hole 9, docs/retention-rules.md): only
 * once housekeeping deleted its conversation (`workers/housekeeping/conversations.ts`, after 30
 * idle days with no input, turn, cutoff, mailbox row, effect in flight, timer, pending input or
 * running turn left), so the next input restarts at position 1 and turn 1 with nothing of the
 * old numbering to collide with; and, like every instance, only when idle (instance-retention.ts).
 * 8 days: longer than the reply bindings' 7-day lifetime.
 */
export const CONVERSATION_INSTANCE_RETENTION = {
  idleMs: 8 * 86_400_000,
  keepWhile: 'exists (select 1 from channel_conversations c where c.id = i.id)',
} as const;

/** The conversation actor; settings are read per event (they come from the environment). */
export function conversationActor(settings: () => ConversationSettings): ActorType<ConversationState> {
  return {
    type: CONVERSATION_ACTOR,
    initialState: initial,
    retention: CONVERSATION_INSTANCE_RETENTION,
    handle(event: ActorEvent, state: ConversationState, ctx) {
      const s = { ...initial(), ...state };
      if (event.type === 'timer') return onTimer(s, ctx, settings());
      if (event.key.startsWith('in:')) return onInput(s, event.payload as InputMessage, ctx, settings());
      if (event.key.startsWith(RESUME_KEY_PREFIX))
        return onResume(s, event.payload as ResumePayload, ctx, MAX_TURN_INPUTS);
      if (event.key.startsWith(RECALL_KEY_PREFIX)) return onRecall(s, event.payload as RecallPayload, ctx);
      const rk = runtimeKey(event.key);
      return rk ? onRuntime(s, rk, event.payload, ctx) : s;
    },
  };
}
