import type { Pool, PoolClient } from '@neondatabase/serverless';
import { onPool } from '../db/pool';
import type { Config } from '../env';
import { readSettings } from '../installations/settings';
import { type Installation, loadInstallation } from '../installations/store';
import { log } from '../log';
import * as ledger from '../typing-ledger';
import { isConversationInputLive } from './liveness';

/**
 * The four points where the conversation engine hands the typing-badge ledger
 * (workers/typing-ledger, spec lark-typing-reaction-cleanup) what it needs. The engine
 * calls them; the ledger owns their bodies. Signatures are stable: change bodies only.
 * Point (1), registration, has no function here: it is part of the webhook's one statement
 * (accept.ts, through the ledger's `registerCtes`).
 *
 * Vocabulary. A session is one conversation = one actor instance (`sessionId` is the actor
 * instance id, `lark-conversation:<installation>:<chat>:<thread|->`). Every recorded input
 * gets a `position`, strictly increasing within the session (gaps possible), and carries
 * the session's `contextRevision` at the time it was recorded. A turn covers every input of
 * its context revision with `position <= cutoffPosition` not covered by an earlier turn,
 * including coalesced inputs that are not the reply's anchor. The cutoff and revision are
 * written to `channel_turns` in the fenced commit that starts the turn (the flush), before
 * any detached work, and again with the outcome in the terminal transaction.
 */

/** One newly recorded user message, as the webhook's statement recorded it (accept.ts). */
export interface TypingInput {
  /** Actor instance id of the conversation. */
  sessionId: string;
  installationId: string;
  workspaceId: string;
  /** The installation's App ID: sweeps only remove reactions whose operator is this app. */
  appId: string;
  chatId: string;
  threadId: string | null;
  /** The Lark message the badge goes on (`om_…`). */
  messageId: string;
  /** Lark's `message.create_time` (epoch ms), null when Lark sent something unparsable. */
  messageCreatedAtMs: number | null;
  position: number;
  contextRevision: number;
  /** Worker clock when the event arrived (not a deadline: deadlines come from `app_now()`). */
  receivedAtMs: number;
  /**
   * The installation with its opened secrets, so the ledger can seal a credential snapshot
   * (app secret, API host) bound to its own row. Never log or return it.
   */
  installation: Installation;
}

/** What registration decided: whether the Add may be sent, and the ledger row if any. */
export interface TypingRegistration {
  sendAdd: boolean;
  ledgerId: string | null;
}

/** An input after the webhook's transaction committed and the 200 went out. */
export interface AnsweredInput {
  input: TypingInput;
  registration: TypingRegistration;
}

/**
 * How a turn ended. `delivered`: the reply is posted. `failed`: the agent or delivery gave
 * up (timeouts, permanent errors, retries exhausted). `retired`: effect recovery retired the
 * reply after its process died and no replacement generation was started. `anchor_gone`:
 * the message to reply to was recalled or deleted. `recalled`: every input of the turn was
 * recalled before its reply was claimed (reply-claim.ts): no reply, no failure notice.
 */
export type TurnOutcome = 'delivered' | 'failed' | 'retired' | 'anchor_gone' | 'recalled';

/** One terminal turn, as written in the actor's terminal transaction. */
export interface TurnSettlement {
  sessionId: string;
  installationId: string;
  workspaceId: string;
  appId: string;
  /** 1, 2, … per session. */
  turnNo: number;
  contextRevision: number;
  /** Every input of `contextRevision` with position <= cutoff belongs to this or an earlier turn. */
  cutoffPosition: number;
  /** The positions this turn coalesced (ascending), anchor included. */
  positions: number[];
  /** Every Lark message id the turn covered (same order as `positions`). */
  messageIds: string[];
  /** The trigger: the message the reply answers (the newest input of the turn). */
  anchorMessageId: string;
  outcome: TurnOutcome;
  /** The posted reply's message id, when delivered. */
  replyMessageId: string | null;
}

/**
 * (2) In `waitUntil` after the 200, only for a newly recorded input: the Typing Add goes
 * here. On the request's pool when the caller passes it (the webhook: one connection per
 * event), else on a pool of its own; never throws: a failure the ledger did not handle
 * itself is logged once as `typing_add_error` with its class.
 */
export async function afterInputAnswered(
  config: Config,
  answered: AnsweredInput,
  requestPool?: Pool,
): Promise<void> {
  const { input, registration } = answered;
  if (!registration.sendAdd || !registration.ledgerId) return;
  await onPool(config, requestPool, (pool) =>
    ledger.addTypingBadge(
      pool,
      {
        kind: 'registered',
        id: registration.ledgerId!,
        messageId: input.messageId,
        installation: input.installation,
      },
      // Revalidate the exact input against the engine too (turn not terminal, conversation
      // still in its revision, installation active): an ended input loses the badge at once.
      { isInputLive: isConversationInputLive },
    ),
  ).catch((err: unknown) =>
    log.error('typing_add_error', { sessionId: input.sessionId, rowId: registration.ledgerId, error: err }),
  );
}

/**
 * (2b) Inside the fenced commit that starts a turn (the flush), next to the `channel_turns`
 * row: every input of `contextRevision` up to `cutoffPosition` now has a task, so the
 * maintenance pass's two-minute taskless expiry must not withdraw their badges while the
 * agent runs. Write only through `tx`; a throw rolls the flush back.
 */
export async function markTurnInputsTasked(
  tx: PoolClient,
  turn: { sessionId: string; contextRevision: number; cutoffPosition: number },
): Promise<void> {
  await ledger.markInputsTasked(tx, turn);
}

/**
 * (3) Inside the actor's terminal transaction for a turn (reply delivered, turn failed,
 * effect retired), after the fenced commit and after `channel_turns` records the outcome.
 * Settles every input of the session in `turn.contextRevision` up to `turn.cutoffPosition`.
 * Write only through `tx`; no remote call; a throw rolls the terminal commit back (and the
 * actor retries the message).
 */
export async function settleTurnInputs(tx: PoolClient, turn: TurnSettlement): Promise<void> {
  await ledger.settleTurnInputs(tx, {
    sessionId: turn.sessionId,
    contextRevision: turn.contextRevision,
    cutoffPosition: turn.cutoffPosition,
    settledBy: `turn:${turn.turnNo}`,
    outcome: turn.outcome,
  });
}

/**
 * (4) After that commit, from a durable `channel.turn-settled` effect (retried, at most 3
 * attempts): withdraw the badges of the settled inputs precisely by reaction id. On the
 * actor host's pool when given, else on its own. Throwing schedules a retry; the ledger's
 * maintenance passes remain the backstop.
 */
export async function afterTurnSettled(config: Config, turn: TurnSettlement, hostPool?: Pool): Promise<void> {
  await onPool(config, hostPool, async (pool) => {
    const ids = await ledger.settledRowIds(pool, turn);
    const results = await ledger.withdrawAfterCommit(pool, config.SECRET_KEYS, ids);
    // Badges that predate the ledger: sweep the reply's anchor when it has no row. Not under
    // `typing_badge` off or quiet: no badge of ours can be there without a row, and those
    // settings exist to spare the app's calls (docs/operations.md "Installation settings").
    if (
      turn.outcome === 'delivered' &&
      (await readSettings(pool, turn.installationId)).typing_badge === 'on'
    ) {
      const inst = await loadInstallation(pool, config.SECRET_KEYS, turn.installationId);
      if (inst) await ledger.sweepDeliveryAnchor(pool, inst, turn.anchorMessageId);
    }
    // Throwing schedules the effect's retry; the maintenance pass is the backstop either way.
    // A rate-limited row is not a failure here: it is scheduled for the retry pass at Lark's
    // reset, and the effect's retries (~2 s, 4 s) would only find the route still held.
    const failed = Object.values(results).filter((o) => o === 'retryable' || o === 'error').length;
    if (failed > 0) throw new Error(`${failed} typing badge withdrawals did not finish`);
  });
}

/** Inputs a resume dropped (the operator chose not to answer a paused backlog): one cutoff per context revision. */
export interface DroppedInputs {
  sessionId: string;
  installationId: string;
  contextRevision: number;
  /** Every input of the revision up to here is settled: the dropped ones and earlier turns' alike. */
  cutoffPosition: number;
}

/** What the ledger records as the settler of a dropped backlog (its rows' `settled_by`). */
export const droppedBy = (d: Pick<DroppedInputs, 'cutoffPosition'>) => `backlog:${d.cutoffPosition}`;

/**
 * (3b) Like (3), inside the fenced commit that drops a backlog on resume (no turn ever covers
 * these inputs): settles them with outcome `dropped`, so a late Add is withdrawn at once
 * (liveness.ts reads the settlement's cutoff) and the maintenance passes leave them alone.
 */
export async function settleDroppedInputs(tx: PoolClient, d: DroppedInputs): Promise<void> {
  await ledger.settleTurnInputs(tx, {
    sessionId: d.sessionId,
    contextRevision: d.contextRevision,
    cutoffPosition: d.cutoffPosition,
    settledBy: droppedBy(d),
    outcome: 'dropped',
  });
}

/** (4b) Like (4), after that commit: the dropped inputs' badges are withdrawn by reaction id. */
export async function afterInputsDropped(config: Config, d: DroppedInputs, hostPool?: Pool): Promise<void> {
  await onPool(config, hostPool, async (pool) => {
    const ids = await ledger.settledRowIds(pool, { ...d, turnNo: 0, settledBy: droppedBy(d) });
    const results = await ledger.withdrawAfterCommit(pool, config.SECRET_KEYS, ids);
    // As in (4): throwing schedules the effect's retry; a rate-limited row waits for the retry pass.
    const failed = Object.values(results).filter((o) => o === 'retryable' || o === 'error').length;
    if (failed > 0) throw new Error(`${failed} typing badge withdrawals of a dropped backlog did not finish`);
  });
}
