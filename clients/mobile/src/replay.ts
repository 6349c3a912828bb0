import { operationStampMs } from '../../../workers/reaction-tickets/operation-id';
import type { ExpiredDetails, MessageReactions, Receipt } from './api-types';
import { dispositionOf } from './dispositions';
import { type JournalEntry, type Outcome, reflectedIn } from './entry';
import type { Journal } from './journal';
import type { Scheduler } from './scheduler';
import type { ServerClock } from './server-clock';
import type { ApiResult, Transport } from './transport';

/**
 * Drives one journal entry through the ticket contract: issue (same operation ID and intent,
 * so a retried issuance returns the same ticket), then write, or retire if a newer choice
 * replaced it. Each step is persisted before its request. Transient failures back off;
 * an unknown outcome keeps the intent until the server answers terminally.
 */
export interface BackoffOptions {
  baseMs: number;
  maxMs: number;
  /**
   * Issuance-quota refusals (429 `quota_exceeded`) of one issuance before it becomes terminal
   * `quota`. The request limiter's 429 (`rate_limited`) never counts: it is always retried.
   */
  maxQuotaRefusals: number;
  random: () => number;
}

/** Re-stamps of one choice before its stamp refusal becomes terminal (`rejected`). */
const MAX_RESTAMPS = 2;

/**
 * What a step ended with: done (terminal), later (backoff), session (token refused), or
 * stopped (signed out mid-step: nothing recorded about the request, it resumes on sign-in).
 */
export type StepEnd = 'done' | 'later' | 'session' | 'stopped';

type Failure = Exclude<ApiResult<unknown>, { kind: 'ok' }>;

export class Replayer {
  constructor(
    private readonly journal: Journal,
    private readonly transport: Transport,
    private readonly scheduler: Scheduler,
    private readonly backoff: BackoffOptions,
    private readonly changed: (e: JournalEntry) => void,
    private readonly clock: ServerClock,
    private readonly mint: (stampMs: number) => string,
  ) {}

  /** `stop` is the session's sign-out signal: every request of this step checks it first. */
  async step(entry: JournalEntry, token: string, stop?: AbortSignal): Promise<StepEnd> {
    // A write of this operation left the device on an earlier attempt without a terminal
    // answer: it may have applied, so no refusal of this attempt can say it was not accepted.
    const wroteBefore = entry.writeSent;
    if (!entry.ticket) {
      // Nothing ever left the device: a replaced choice can simply end here.
      if (entry.supersededBy && !entry.issueSent) return this.finish(entry, 'superseded', null, {});
      entry.issueSent = true;
      await this.save(entry);
      const issued = await this.transport.issue(token, entry.operationId, entry.intent, stop);
      if (issued.kind !== 'ok') return this.failed(entry, token, issued, stop, wroteBefore);
      // A new ticket's issuedAt is the server's time now (a replayed one's is older).
      if (!issued.body.replayed) await this.clock.learn(issued.body.issuedAt);
      entry.ticket = { token: issued.body.ticket, expiresAt: issued.body.expiresAt };
      entry.quotaRefusals = 0;
      await this.save(entry);
    }
    if (entry.supersededBy) return this.retire(entry, token, entry.ticket.token, stop, wroteBefore);
    entry.writeSent = true;
    await this.save(entry);
    const res = await this.transport.write(token, entry.operationId, entry.ticket.token, entry.intent, stop);
    if (res.kind !== 'ok') return this.failed(entry, token, res, stop, wroteBefore);
    return this.finish(entry, 'applied', null, { receipt: res.body.receipt, message: res.body.message });
  }

  /** Retires a replaced operation through the contract: a fence no delayed write can pass. */
  private async retire(
    entry: JournalEntry,
    token: string,
    ticket: string,
    stop: AbortSignal | undefined,
    wroteBefore: boolean,
  ): Promise<StepEnd> {
    const res = await this.transport.retire(token, entry.operationId, ticket, stop);
    if (res.kind !== 'ok') return this.failed(entry, token, res, stop, wroteBefore);
    return this.finish(entry, 'superseded', null, {
      receipt: res.body.receipt ?? null,
      message: res.body.message,
    });
  }

  private async failed(
    entry: JournalEntry,
    token: string,
    res: Failure,
    stop: AbortSignal | undefined,
    wroteBefore: boolean,
  ): Promise<StepEnd> {
    // Signed out: not an attempt; the entry stays as persisted before the request.
    if (res.kind === 'stopped') return 'stopped';
    if (res.kind === 'unknown') return this.later(entry, res.reason, null);
    await this.clock.learn((res.details as { serverTime?: unknown } | null)?.serverTime);
    const disposition = dispositionOf(res.code, res.status);
    if (disposition === 'restamp') {
      // Only issuance judges stamps, so no ticket exists under this ID, and none ever did:
      // its stamp was ahead of server time at every earlier try too.
      if (!entry.ticket && !entry.supersededBy && (entry.restamps ?? 0) < MAX_RESTAMPS)
        return this.restamp(entry, token, stop);
      return this.finish(
        entry,
        entry.supersededBy ? 'superseded' : 'rejected',
        res.code,
        {},
        { token, stop },
      );
    }
    if (disposition === 'retry') return this.later(entry, res.code, res.retryAfterMs);
    if (disposition === 'session') {
      entry.lastError = res.code;
      await this.save(entry);
      return 'session';
    }
    if (disposition === 'quota') {
      // The issuance quota judges only new tickets. An entry that holds a ticket was answered
      // on its write or retirement, which it still owes while the ticket can apply: wait and
      // try again (a newer server's surprise is a "later", never an end).
      if (entry.ticket) return this.later(entry, res.code, res.retryAfterMs);
      entry.quotaRefusals += 1;
      if (entry.quotaRefusals < this.backoff.maxQuotaRefusals)
        return this.later(entry, res.code, res.retryAfterMs);
      // Its issuance was refused and the entry holds no ticket, so no write of this choice
      // ever left the device: nothing of it can apply, even if an earlier issuance whose
      // answer was lost made a ticket (only that lost answer carried it).
      return this.finish(entry, entry.supersededBy ? 'superseded' : 'quota', res.code, {});
    }
    const details = (res.details ?? {}) as Partial<ExpiredDetails>;
    const known: { receipt: Receipt | null; message?: MessageReactions | null } = {
      receipt: details.receipt ?? null,
      message: details.message ?? undefined,
    };
    if (disposition === 'permission_lost') known.message = null;
    return this.finish(
      entry,
      this.outcomeOf(entry, disposition, known.receipt, wroteBefore),
      res.code,
      known,
      {
        token,
        stop,
      },
    );
  }

  /**
   * The terminal outcome of a refusal, chosen so that the words shown for it are true
   * whatever the earlier attempts did (docs/mobile-client.md "Every message is true"):
   * - a replaced choice that can no longer apply (expired, retired, unknown) reached its goal;
   * - an expiry whose answer carries the operation's receipt applied: the receipt says so;
   * - a refusal (`rejected`, e.g. 403 `ticket_invalid` once the ticket's key version is
   *   removed) after an earlier write left without an answer says nothing about that write,
   *   which may have applied: the outcome is `unknown`, shown with the current state.
   */
  private outcomeOf(
    entry: JournalEntry,
    disposition: Exclude<ReturnType<typeof dispositionOf>, 'retry' | 'quota' | 'session' | 'restamp'>,
    receipt: Receipt | null,
    wroteBefore: boolean,
  ): Outcome {
    if (
      entry.supersededBy &&
      (disposition === 'expired' || disposition === 'retired' || disposition === 'unknown')
    )
      return 'superseded';
    if (disposition === 'expired' && receipt) return 'applied';
    if (disposition === 'rejected' && wroteBefore) return 'unknown';
    return disposition;
  }

  /**
   * The server refused the operation's stamp as ahead of its clock: the same choice gets a
   * new ID stamped when it was made, on the corrected clock. A re-stamp only ever moves the
   * stamp back (never makes a choice younger than its first stamp said), and the old ID was
   * never issued, so nothing of it can apply. The step under the new ID carries the session's
   * stop signal like any other: a sign-out while the re-stamp is journaled sends nothing.
   */
  private async restamp(entry: JournalEntry, token: string, stop: AbortSignal | undefined): Promise<StepEnd> {
    const from = entry.operationId;
    const corrected = entry.createdAt + (await this.clock.offset());
    entry.operationId = this.mint(Math.min(corrected, operationStampMs(from) ?? corrected));
    entry.restampedFrom = from;
    entry.restamps = (entry.restamps ?? 0) + 1;
    entry.issueSent = false;
    entry.lastError = 'operation_clock_skew';
    await this.journal.rename(entry, from);
    this.changed(entry);
    return this.step(entry, token, stop);
  }

  private async later(entry: JournalEntry, why: string, retryAfterMs: number | null): Promise<StepEnd> {
    entry.attempts += 1;
    const exp = Math.min(this.backoff.maxMs, this.backoff.baseMs * 2 ** Math.min(entry.attempts - 1, 30));
    const jittered = exp / 2 + (exp / 2) * this.backoff.random();
    entry.nextAttemptAt = this.scheduler.now() + Math.max(jittered, retryAfterMs ?? 0);
    entry.lastError = why;
    await this.save(entry);
    return 'later';
  }

  /**
   * Terminal: stop replaying. The message shown is the server's exact current state (from
   * the answer, else read now); it is never inferred from the lost request.
   */
  private async finish(
    entry: JournalEntry,
    outcome: Outcome,
    code: string | null,
    known: { receipt?: Receipt | null; message?: MessageReactions | null },
    // The state read goes out under the session's token and stop signal, always the two together.
    session?: { token: string; stop: AbortSignal | undefined },
  ): Promise<StepEnd> {
    let message = known.message;
    if (message === undefined && session) {
      const read = await this.transport.reactions(session.token, entry.intent.messageId, session.stop);
      // Signed out before the state was read: record nothing; the terminal answer repeats
      // (it is idempotent) on the next sign-in, and the read with it.
      if (read.kind === 'stopped') return 'stopped';
      message = read.kind === 'ok' ? read.body : null;
    }
    entry.terminal = {
      outcome,
      code,
      at: this.scheduler.now(),
      receipt: known.receipt ?? null,
      message: message ?? null,
      reflected: reflectedIn(message ?? null, entry.actorId, entry.intent.emoji),
    };
    entry.lastError = code;
    await this.save(entry);
    return 'done';
  }

  private async save(entry: JournalEntry): Promise<void> {
    await this.journal.save(entry);
    this.changed(entry);
  }
}
