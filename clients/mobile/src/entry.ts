import type { Intent, MessageReactions, Receipt } from './api-types';
import type { TerminalKind } from './dispositions';

/**
 * One reaction choice in the journal. It is written before any network call and every
 * step is persisted before the next request, so a restart resumes exactly where it stopped.
 */
export interface JournalEntry {
  v: 1;
  actorId: string;
  /**
   * A UUIDv7 stamped when the choice is made (server time as the device estimates it); every
   * replay reuses it. Changed only when the server refused the stamp as ahead of its clock
   * (nothing was issued under it): see `restampedFrom`.
   */
  operationId: string;
  /** The ID this entry had before its last re-stamp (a journal load drops a leftover copy). */
  restampedFrom?: string | null;
  /** Re-stamps so far (bounded). Absent in entries journaled before re-stamping existed. */
  restamps?: number;
  /** Order of choices on this device; a higher seq is a newer choice. */
  seq: number;
  intent: Intent;
  /** When the choice was made, on the device clock. */
  createdAt: number;
  ticket: { token: string; expiresAt: string } | null;
  /** An issuance went out: a ticket may exist on the server even if we never saw it. */
  issueSent: boolean;
  /** A write went out without a terminal answer: its outcome is unknown until one arrives. */
  writeSent: boolean;
  /** A newer choice for the same (message, emoji) replaces this one: retire, never apply. */
  supersededBy: string | null;
  attempts: number;
  quotaRefusals: number;
  nextAttemptAt: number;
  lastError: string | null;
  terminal: Terminal | null;
}

export type Outcome = 'applied' | 'superseded' | TerminalKind;

export interface Terminal {
  outcome: Outcome;
  /** The server code that ended it, if any. */
  code: string | null;
  at: number;
  receipt: Receipt | null;
  /** The exact current reactions of the message when known (null: not readable, e.g. access lost). */
  message: MessageReactions | null;
  /**
   * Whether the actor's reaction shows in `message`. This is the truth after reconciliation;
   * it never says whether this particular operation applied.
   */
  reflected: 'present' | 'absent' | 'unknown';
}

export type EntryStatus = 'queued' | 'unconfirmed' | 'retiring' | 'done';

/** queued: nothing written yet; unconfirmed: a write went out without an answer. */
export function statusOf(e: JournalEntry): EntryStatus {
  if (e.terminal) return 'done';
  if (e.supersededBy) return 'retiring';
  return e.writeSent ? 'unconfirmed' : 'queued';
}

export function reflectedIn(
  message: MessageReactions | null,
  actorId: string,
  emoji: string,
): Terminal['reflected'] {
  if (!message) return 'unknown';
  const row = message.reactions.find((r) => r.emoji === emoji);
  return row?.actorIds.includes(actorId) ? 'present' : 'absent';
}
