import type { EffectHandle } from '../effects/types';
import type { HeldResume } from './backlog';
import type { NoticeLocale } from './notices';
import type { TurnOutcome } from './typing-hooks';

// The conversation actor's state, its mailbox payload and its reply effect's contract.

export interface ConversationSettings {
  /** Quiet time after the newest input before a turn starts. */
  debounceMs: number;
  /** A burst never delays its first input longer than this. */
  maxDebounceMs: number;
}

/** The mailbox payload the webhook enqueues (key `in:<position>`). */
export interface InputMessage {
  session: SessionInfo;
  position: number;
  contextRevision: number;
  messageId: string;
  senderOpenId: string | null;
  text: string;
  createdAtMs: number | null;
  /**
   * Only on a re-run's copy of an input (key `in:rerun:<turn>:<position>`, rerun.ts): the
   * failed turn it re-runs. A release that predates re-runs reads the message as an input.
   */
  rerunOf?: number;
}

export interface SessionInfo {
  installationId: string;
  workspaceId: string;
  appId: string;
  chatId: string;
  threadId: string | null;
}

export type TurnInput = Omit<InputMessage, 'session'>;

export interface RunningTurn {
  turnNo: number;
  contextRevision: number;
  inputs: TurnInput[];
  cutoffPosition: number;
  anchorMessageId: string;
  /** The Lark `uuid` of the reply: the first generation's effect id, for every generation. */
  deliveryKey: string;
  generation: number;
  current: EffectHandle;
}

export interface ConversationState {
  session: SessionInfo | null;
  pending: TurnInput[];
  firstPendingAtMs: number | null;
  dueAtMs: number | null;
  turnNo: number;
  turn: RunningTurn | null;
  lastOutcome: { turnNo: number; outcome: TurnOutcome } | null;
  /** A resume's backlog choice waiting for the running turn's end (backlog.ts). */
  heldResume: HeldResume | null;
}

/** The `channel.reply` effect's arguments (no secrets: the executor loads the installation). */
export interface ReplyArgs {
  sessionId: string;
  session: SessionInfo;
  turnNo: number;
  generation: number;
  contextRevision: number;
  anchorMessageId: string;
  /** null for generation 1: the executor uses its own effect id. */
  deliveryKey: string | null;
  inputs: TurnInput[];
}

/** What a reply run reports on completion. */
export interface ReplyResult {
  /**
   * `held`: the reply route was held by a recorded Lark 429 (rate-limits.ts) or answered 429,
   * so nothing was posted; the turn runs the same generation again after `retryAfterMs`.
   * `recalled`: every input was recalled before the reply was claimed (reply-claim.ts).
   */
  outcome: 'delivered' | 'anchor_gone' | 'failed' | 'held' | 'recalled';
  replyMessageId: string | null;
  reason?: string;
  /** With `held`: how long the route stays held, from Lark's reset. */
  retryAfterMs?: number;
}

/** A failed turn's notice to its user (failure-notice.ts), emitted by its settlement. */
export const FAILURE_NOTICE_KIND = 'channel.failure-notice';

export interface FailureNoticeArgs {
  sessionId: string;
  installationId: string;
  turnNo: number;
  /** The turn's newest input: the reaction goes on it, the reply answers it. */
  anchorMessageId: string;
  /** The turn's reply uuid; the notice's own uuid is derived from it (never equal to it). */
  deliveryKey: string;
  locale: NoticeLocale;
}
