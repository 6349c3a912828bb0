import { mintOperationId } from '../../../workers/reaction-tickets/operation-id';
import { normalizeEmoji } from '../../../workers/reaction-tickets/types';
import type { Intent } from './api-types';
import type { JournalEntry } from './entry';
import { Journal } from './journal';
import { type BackoffOptions, Replayer } from './replay';
import { type Scheduler, systemScheduler } from './scheduler';
import { ServerClock } from './server-clock';
import type { KeyValueStore } from './storage';
import { type FetchLike, Transport } from './transport';

/**
 * The reaction client a mobile app holds for its lifetime: journal first, then replay
 * through the ticket contract. Signing out stops replay and keeps the journal; signing the
 * same actor back in resumes it. See docs/mobile-client.md.
 */
export interface ReactionClientOptions {
  baseUrl: string;
  storage: KeyValueStore;
  fetch?: FetchLike;
  scheduler?: Scheduler;
  /** Per request; a timeout is an unknown outcome (default 15 s). */
  requestTimeoutMs?: number;
  backoff?: Partial<BackoffOptions>;
  /** Entries per replay pass (default 50); the next pass is scheduled right after. */
  batchSize?: number;
  /** Replay on its own via the scheduler (default true); tests may call sync() instead. */
  autoSync?: boolean;
  /** Mints an operation ID stamped `stampMs` (default: a UUIDv7; the server requires one). */
  newOperationId?: (stampMs: number) => string;
}

export interface Session {
  actorId: string;
  token: string;
}

export type SessionState = 'signed_out' | 'active' | 'needs_sign_in';

export interface SyncReport {
  processed: number;
  done: number;
  waiting: number;
  session: SessionState;
}

export class ReactionClient {
  private readonly journal: Journal;
  private readonly replayer: Replayer;
  private readonly scheduler: Scheduler;
  private readonly clock: ServerClock;
  private readonly mint = (stampMs: number) =>
    this.opts.newOperationId?.(stampMs) ?? mintOperationId(stampMs);
  private readonly listeners = new Set<(e: JournalEntry) => void>();
  private session: Session | null = null;
  /**
   * The session's generation: a fresh controller per sign-in, aborted by signOut(). A pass
   * holds the signal of the session it started in and hands it to every request, which
   * checks it right before `fetch` and aborts on it, so a stopped session sends nothing.
   */
  private sessionStop = new AbortController();
  private state: SessionState = 'signed_out';
  private running: Promise<SyncReport> | null = null;
  private again = false;
  private cancelTimer: (() => void) | null = null;

  constructor(private readonly opts: ReactionClientOptions) {
    this.scheduler = opts.scheduler ?? systemScheduler;
    this.journal = new Journal(opts.storage);
    const transport = new Transport({
      baseUrl: opts.baseUrl.replace(/\/$/, ''),
      fetch: opts.fetch ?? ((input, init) => fetch(input, init)),
      scheduler: this.scheduler,
      requestTimeoutMs: opts.requestTimeoutMs ?? 15_000,
    });
    const backoff: BackoffOptions = {
      baseMs: 1000,
      maxMs: 5 * 60_000,
      maxQuotaRefusals: 3,
      random: Math.random,
      ...opts.backoff,
    };
    this.clock = new ServerClock(opts.storage, this.scheduler);
    this.replayer = new Replayer(
      this.journal,
      transport,
      this.scheduler,
      backoff,
      (e) => this.emit(e),
      this.clock,
      this.mint,
    );
  }

  get sessionState(): SessionState {
    return this.state;
  }

  /** Starts (or resumes) replay of `actorId`'s journal, including entries from before a sign-out. */
  async signIn(session: Session): Promise<void> {
    this.sessionStop.abort();
    this.sessionStop = new AbortController();
    this.session = { ...session };
    this.state = 'active';
    this.kick(0);
  }

  /** A refreshed token for the same actor. */
  updateToken(token: string): void {
    if (this.session) this.session.token = token;
    if (this.state === 'needs_sign_in') this.state = 'active';
    this.kick(0);
  }

  /**
   * Stops replay and forgets the token. The journal stays: its entries resume on sign-in.
   * The request in flight is aborted and no later step sends anything; when the returned
   * promise resolves the pass has ended, so no request of this session leaves the device
   * after it. (A request already on the wire may still reach the server: its outcome stays
   * unknown in the journal and is reconciled on the next sign-in.)
   */
  async signOut(): Promise<void> {
    this.sessionStop.abort();
    this.session = null;
    this.state = 'signed_out';
    this.cancelTimer?.();
    this.cancelTimer = null;
    // By design: the pass's outcome was already recorded in the journal; only its end matters here.
    await this.running?.catch(() => undefined);
  }

  /**
   * Records a new explicit choice: a new operation ID, journaled before any request. Older
   * unfinished choices for the same (message, emoji) are marked replaced, and replay retires
   * them through the contract before this one is written. "Older" is by `seq`, reserved in
   * call order when the choice is journaled, never by which journaling finishes first: two
   * quick choices can only ever replace in one direction, so the newest one is sent.
   */
  async choose(intent: Intent): Promise<JournalEntry> {
    const actorId = this.session?.actorId;
    if (!actorId) throw new Error('choose() needs a signed-in actor');
    const canonical: Intent = { ...intent, emoji: normalizeEmoji(intent.emoji) };
    const now = this.scheduler.now();
    // The seq is reserved before the first await of this call: a later await (here the stamp's
    // clock read, which on a cold start reads storage) may resolve in any order, and the
    // reservation must follow call order (journal.ts: nextSeq).
    // Stamped with the server's time as this device knows it: the server admits an operation
    // only inside the window after its stamp.
    const [seq, stamp] = await Promise.all([this.journal.nextSeq(actorId), this.clock.now()]);
    const entry: JournalEntry = {
      v: 1,
      actorId,
      operationId: this.mint(stamp),
      restampedFrom: null,
      restamps: 0,
      seq,
      intent: canonical,
      createdAt: now,
      ticket: null,
      issueSent: false,
      writeSent: false,
      supersededBy: null,
      attempts: 0,
      quotaRefusals: 0,
      nextAttemptAt: now,
      lastError: null,
      terminal: null,
    };
    await this.journal.save(entry);
    for (const other of await this.journal.list(actorId)) {
      if (other === entry) continue;
      if (other.intent.messageId !== canonical.messageId || other.intent.emoji !== canonical.emoji) continue;
      // A choice made after this one journaled first: this one is the older, never sent as is.
      const [older, newer] = other.seq > entry.seq ? [entry, other] : [other, entry];
      if (older.terminal || older.supersededBy) continue;
      older.supersededBy = newer.operationId;
      older.nextAttemptAt = now;
      await this.journal.save(older);
      this.emit(older);
    }
    this.emit(entry);
    this.kick(0);
    return entry;
  }

  /** The signed-in actor's entries, oldest first (terminal ones stay until dismissed). */
  async entries(): Promise<JournalEntry[]> {
    return this.session ? this.journal.list(this.session.actorId) : [];
  }

  /** Actors with unfinished entries on this device (e.g. to prompt "sign in to finish"). */
  pendingActors(): Promise<string[]> {
    return this.journal.actorsWithPending();
  }

  /** The user acknowledged a terminal entry: drop it. Unfinished entries cannot be dismissed. */
  async dismiss(operationId: string): Promise<boolean> {
    if (!this.session) return false;
    const entry = await this.journal.get(this.session.actorId, operationId);
    if (!entry?.terminal) return false;
    await this.journal.remove(entry.actorId, operationId);
    return true;
  }

  /** Re-queues a choice that ended on quota (nothing of it was issued, so its ID is reused). */
  async retryQuota(operationId: string): Promise<boolean> {
    if (!this.session) return false;
    const entry = await this.journal.get(this.session.actorId, operationId);
    if (entry?.terminal?.outcome !== 'quota') return false;
    Object.assign(entry, { terminal: null, quotaRefusals: 0, nextAttemptAt: this.scheduler.now() });
    await this.journal.save(entry);
    this.kick(0);
    return true;
  }

  subscribe(listener: (e: JournalEntry) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** One replay pass over the due entries; concurrent calls share a pass and queue one more. */
  sync(): Promise<SyncReport> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = this.pass().finally(() => {
      this.running = null;
      if (this.again) {
        this.again = false;
        this.kick(0);
      }
    });
    return this.running;
  }

  private async pass(): Promise<SyncReport> {
    const report: SyncReport = { processed: 0, done: 0, waiting: 0, session: this.state };
    const session = this.session;
    const stop = this.sessionStop.signal;
    if (!session || this.state !== 'active') return report;
    const blocked = new Set<string>();
    const limit = this.opts.batchSize ?? 50;
    for (const entry of await this.journal.list(session.actorId)) {
      if (entry.terminal) continue;
      const key = `${entry.intent.messageId}\u0000${entry.intent.emoji}`;
      // An older unfinished choice of the same reaction goes first (its retirement fences it).
      const due = entry.nextAttemptAt <= this.scheduler.now();
      if (blocked.has(key) || !due || report.processed >= limit || stop.aborted) {
        blocked.add(key);
        report.waiting += 1;
        continue;
      }
      report.processed += 1;
      const end = await this.replayer.step(entry, session.token, stop);
      if (end === 'done') report.done += 1;
      else {
        blocked.add(key);
        report.waiting += 1;
      }
      if (end === 'stopped') break;
      if (end === 'session') {
        if (this.session === session) this.state = 'needs_sign_in';
        break;
      }
    }
    report.session = this.state;
    void this.scheduleNext(session.actorId, report.processed >= limit);
    return report;
  }

  private async scheduleNext(actorId: string, moreNow: boolean): Promise<void> {
    if (this.state !== 'active' || this.session?.actorId !== actorId) return;
    if (moreNow) return this.kick(0);
    const open = (await this.journal.list(actorId)).filter((e) => !e.terminal);
    if (open.length)
      this.kick(Math.max(0, Math.min(...open.map((e) => e.nextAttemptAt)) - this.scheduler.now()));
  }

  private kick(delayMs: number): void {
    if (this.opts.autoSync === false || this.state !== 'active') return;
    this.cancelTimer?.();
    this.cancelTimer = this.scheduler.at(this.scheduler.now() + delayMs, () => {
      this.cancelTimer = null;
      void this.sync();
    });
  }

  private emit(entry: JournalEntry): void {
    for (const l of this.listeners) l(entry);
  }
}
