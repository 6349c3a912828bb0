import type { ActorContext, EffectExecutor } from '../effects/registry';
import { log } from '../log';
import type { BacklogChoice, ResumePayload } from './pause';
import type { ChannelDeps } from './reply';
import type { ConversationState, TurnInput } from './types';
import { afterInputsDropped, type DroppedInputs, settleDroppedInputs } from './typing-hooks';

/**
 * The conversation's side of a resume (pause.ts): what it held while its installation was
 * paused (`pending`, never started) is its backlog. The operator's choice is applied once, by
 * the resume's message: `answer` keeps only the newest turn's worth of inputs (the rest are
 * dropped) and starts it at once; `drop` drops them all. Dropped inputs are settled in the
 * ledger (3b) and their badges withdrawn after the commit (4b): none is left behind.
 */
export const DROPPED_KIND = 'channel.inputs-dropped';

export interface HeldResume {
  backlog: BacklogChoice;
  /** The backlog is every pending input up to this position when the resume arrived. */
  through: number;
}

export function onResume(
  s: ConversationState,
  payload: ResumePayload,
  ctx: ActorContext,
  maxTurnInputs: number,
): ConversationState {
  // Only the route writes this payload; anything else is answered rather than thrown away.
  const backlog: BacklogChoice = payload?.backlog === 'drop' ? 'drop' : 'answer';
  const through = s.pending.at(-1)?.position;
  if (through === undefined) return s;
  // A turn that started before the pause is still running: its inputs are its own to settle,
  // so the choice waits for its end (conversation.ts `settle`).
  if (s.turn) return { ...s, heldResume: { backlog, through } };
  return applyBacklog(s, ctx, { backlog, through }, maxTurnInputs);
}

export function applyBacklog(
  s: ConversationState,
  ctx: ActorContext,
  r: HeldResume,
  maxTurnInputs: number,
): ConversationState {
  const backlog = s.pending.filter((p) => p.position <= r.through);
  const later = s.pending.filter((p) => p.position > r.through);
  const keep = r.backlog === 'answer' ? backlog.slice(-maxTurnInputs) : [];
  const dropped = backlog.slice(0, backlog.length - keep.length);
  if (dropped.length > 0) drop(s, ctx, dropped);
  const pending = [...keep, ...later];
  // Due at once: the backlog waited long enough. The timer goes through the turn start's gate.
  if (pending.length > 0) ctx.setTimer(ctx.nowMs);
  const due = pending.length > 0 ? ctx.nowMs : null;
  return { ...s, pending, heldResume: null, firstPendingAtMs: due, dueAtMs: due };
}

function drop(s: ConversationState, ctx: ActorContext, dropped: TurnInput[]): void {
  // One settlement per context revision, up to its newest dropped input.
  const cutoffs = new Map<number, number>();
  for (const i of dropped)
    cutoffs.set(i.contextRevision, Math.max(cutoffs.get(i.contextRevision) ?? 0, i.position));
  for (const [contextRevision, cutoffPosition] of cutoffs) {
    const d: DroppedInputs = {
      sessionId: ctx.instanceId,
      installationId: s.session!.installationId,
      contextRevision,
      cutoffPosition,
    };
    ctx.inCommit((tx) => settleDroppedInputs(tx, d));
    ctx.emit(DROPPED_KIND, d, { maxAttempts: 3 });
  }
  log.info('channel_backlog_dropped', { sessionId: ctx.instanceId, inputs: dropped.length });
}

/** `channel.inputs-dropped`: the after-commit half of a drop (badge withdrawal). */
export function droppedExecutor(deps: Pick<ChannelDeps, 'config'>): EffectExecutor {
  return {
    kind: DROPPED_KIND,
    timeoutMs: 15_000,
    // The ledger withdraws each badge once whoever runs it (as channel.turn-settled).
    idempotentByKey: true,
    async run(effect, _signal, ctx) {
      await afterInputsDropped(deps.config(), effect.args as DroppedInputs, ctx?.pool);
      return { ok: true };
    },
  };
}
