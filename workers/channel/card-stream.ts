import { Deadline } from '../clock';
import type { LarkClient } from '../lark/client';
import { LarkApiError, RATE_LIMITED_CODE } from '../lark/errors';
import { log } from '../log';
import type { NoticeLocale } from './notices';
import {
  findCard,
  markFinished,
  markSent,
  type ReplyCard,
  recordCard,
  reserveSequences,
  streamingCards,
  type TurnKey,
} from './reply-cards';

/**
 * A turn's reply as a CardKit streaming card (issue 34, docs/channel.md "Streaming cards").
 *
 * Lifecycle: the card entity is created with the first text, recorded in `channel_reply_cards`
 * before it is sent, sent as the reply to the anchor with the turn's uuid, then its element's
 * whole text is pushed at a bounded rate while the agent answers, and finally the card is
 * replaced whole with the final text and streaming off. Every writer of a card (a replacement
 * generation, a restarted host while the old incarnation still runs) works on the one recorded
 * card and takes its sequences from blocks reserved in Postgres, so they strictly increase
 * across writers. A push that fails is not retried: the next one carries the whole text.
 */

/** The card's one text element. */
export const CARD_ELEMENT_ID = 'reply';
/** At most 4 pushes a second per card (Lark allows 10 operations a second per card). */
export const MIN_PUSH_INTERVAL_MS = 250;
/**
 * Lark allows 50 CardKit operations a second per app; pushes share 40 of them among the app's
 * cards still streaming (the rest is left for creates, sends and finishes).
 */
export const APP_PUSHES_PER_SECOND = 40;
/** Sequences reserved per statement: one reservation serves this many updates. */
export const SEQUENCE_BLOCK = 16;
/** How often a stream re-counts its installation's cards streaming (its pace follows them). */
export const PACE_REFRESH_MS = 2000;
/** A finish held by a recorded 429 waits for resets up to this long, at most this often. */
const FINISH_HOLD_MAX_MS = 3000;
const FINISH_ATTEMPTS = 3;
/** One push or finish call gets this much of the run's time. */
const CALL_BUDGET_MS = 3000;

/** Card JSON 2.0 (reference §6): one markdown element, streaming on or off. */
export function cardJson(text: string, streaming: boolean): object {
  return {
    schema: '2.0',
    config: { streaming_mode: streaming, update_multi: true },
    body: { elements: [{ tag: 'markdown', element_id: CARD_ELEMENT_ID, content: text }] },
  };
}

/** The push interval for one card when `live` cards of its app are streaming. */
export function pushIntervalMs(live: number): number {
  return Math.max(MIN_PUSH_INTERVAL_MS, Math.ceil((1000 * Math.max(1, live)) / APP_PUSHES_PER_SECOND));
}

export interface CardStreamDeps {
  lark: LarkClient;
  /** Runs a statement batch on the run's connection (the host's, or a short one of its own). */
  db: <T>(use: (q: Parameters<typeof findCard>[0]) => Promise<T>) => Promise<T>;
  turn: TurnKey & { installationId: string; locale: NoticeLocale };
  anchorMessageId: string;
  /** The turn's Lark reply uuid (deliveryUuid). */
  uuid: string;
  signal: AbortSignal;
  now?: () => number;
}

/** Why a card stream could not deliver: what the reply executor reports for it. */
export class CardRefused extends Error {
  constructor(
    readonly stage: 'create' | 'send' | 'sequence',
    override readonly cause: unknown,
  ) {
    super(`card ${stage} refused`);
  }
}

export class CardStream {
  private card: ReplyCard | null;
  private nextSeq = 0;
  private seqEnd = 0;
  private latest = '';
  private pushed: string | null = null;
  private lastPushAt = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private inFlight: Promise<void> | null = null;
  private fatal: unknown = null;
  /** An update was refused: a newer writer owns the card, or it is closed. No more pushes. */
  private refused = false;
  private pushesRefused = 0;
  private pushesFailed = 0;
  private heldUntil = 0;
  private interval = MIN_PUSH_INTERVAL_MS;
  private paceReadAt = 0;
  private readonly now: () => number;

  private constructor(
    private readonly deps: CardStreamDeps,
    existing: ReplyCard | null,
  ) {
    this.card = existing;
    this.now = deps.now ?? Date.now;
  }

  /** The stream of a turn, continuing its recorded card when an earlier writer made one. */
  static async open(deps: CardStreamDeps): Promise<CardStream> {
    const existing = await deps.db((q) => findCard(q, deps.turn));
    const stream = new CardStream(deps, existing);
    stream.interval = pushIntervalMs(await deps.db((q) => streamingCards(q, deps.turn.installationId)));
    // Counted now: the first pushes need not count again until the refresh is due.
    stream.paceReadAt = stream.now();
    return stream;
  }

  /** The recorded card, if any writer of the turn recorded one. */
  get recorded(): ReplyCard | null {
    return this.card;
  }

  /** The agent's text so far: pushed at the paced rate, coalesced with later deltas. */
  onText(text: string): void {
    this.latest = text;
    this.schedule();
  }

  /** The first failure that stops the stream (create or send refused), rethrown by `finish`. */
  get failure(): unknown {
    return this.fatal;
  }

  private schedule(): void {
    if (this.fatal || this.refused || this.timer || this.inFlight || this.latest === this.pushed) return;
    const wait = Math.max(0, this.lastPushAt + this.interval - this.now(), this.heldUntil - this.now());
    this.timer = setTimeout(() => {
      this.timer = null;
      this.inFlight = this.pushLatest().finally(() => {
        this.inFlight = null;
        this.schedule();
      });
    }, wait);
  }

  private async pushLatest(): Promise<void> {
    const text = this.latest;
    try {
      // The first text creates and sends the card with it (visible at once); later texts update it.
      if (!this.card?.sentMessageId) {
        // A card this run creates carries the text; one an earlier writer created does not.
        const created = !this.card;
        await this.ensureSent(text);
        this.lastPushAt = this.now();
        if (created) {
          this.pushed = text;
          return;
        }
      }
      const card = this.card!;
      // Cards started together each counted few others when they opened: the pace follows
      // the installation's cards streaming now, so together they stay within the app's share.
      if (this.now() - this.paceReadAt >= PACE_REFRESH_MS) {
        this.paceReadAt = this.now();
        this.interval = pushIntervalMs(
          await this.deps.db((q) => streamingCards(q, this.deps.turn.installationId)),
        );
      }
      const sequence = await this.takeSequence();
      await this.deps.lark.setCardElementText(
        card.cardId,
        CARD_ELEMENT_ID,
        { content: text, sequence },
        { deadline: new Deadline(CALL_BUDGET_MS), signal: this.deps.signal },
      );
      this.pushed = text;
      this.lastPushAt = this.now();
    } catch (err) {
      if (err instanceof CardRefused) {
        this.fatal = err;
        return;
      }
      if (err instanceof LarkApiError && (err.httpStatus === 429 || err.code === RATE_LIMITED_CODE)) {
        // By design: the reset is recorded for every isolate by the client; the next push waits it out.
        this.heldUntil = this.now() + (err.retryAfterSeconds ?? 1) * 1000;
        return;
      }
      if (err instanceof LarkApiError && err.kind !== 'retryable') {
        // A refused update (a newer writer's sequence, or a closed card; Lark's answer
        // UNCONFIRMED): this writer pushes no more (retrying would only be refused again, and
        // fast enough to spend the card's rate); the finish still runs and decides. Counted in
        // the stream's one log line.
        this.pushesRefused++;
        this.refused = true;
        return;
      }
      // By design: a failed push is not retried, the next one carries the whole text.
      this.pushesFailed++;
      this.lastPushAt = this.now();
    }
  }

  /** Creates (when no writer did), records and sends the card; the first text goes in it. */
  async ensureSent(text: string): Promise<ReplyCard> {
    const call = () => ({ deadline: new Deadline(CALL_BUDGET_MS), signal: this.deps.signal });
    if (!this.card) {
      let cardId: string;
      try {
        cardId = await this.deps.lark.createCard(cardJson(text, true), call());
      } catch (err) {
        if (err instanceof LarkApiError && err.kind !== 'retryable') throw new CardRefused('create', err);
        throw err;
      }
      this.card = await this.deps.db((q) => recordCard(q, { ...this.deps.turn, cardId }));
    }
    if (!this.card.sentMessageId) {
      const card = this.card;
      let sent: { message_id: string };
      try {
        sent = await this.deps.lark.replyMessage(
          this.deps.anchorMessageId,
          {
            msgType: 'interactive',
            content: JSON.stringify({ type: 'card', data: { card_id: card.cardId } }),
            uuid: this.deps.uuid,
          },
          call(),
        );
      } catch (err) {
        if (err instanceof LarkApiError && err.kind !== 'retryable' && err.httpStatus !== 429)
          throw new CardRefused('send', err);
        throw err;
      }
      await this.deps.db((q) => markSent(q, this.deps.turn, sent.message_id));
      this.card = { ...card, sentMessageId: card.sentMessageId ?? sent.message_id };
    }
    return this.card;
  }

  private async takeSequence(): Promise<number> {
    if (this.nextSeq >= this.seqEnd) {
      const block = await this.deps.db((q) => reserveSequences(q, this.deps.turn, SEQUENCE_BLOCK));
      if (!block) throw new CardRefused('sequence', null);
      this.seqEnd = block.last;
      this.nextSeq = block.last - SEQUENCE_BLOCK;
    }
    this.nextSeq++;
    return this.nextSeq;
  }

  /** Stops pushing and waits for a push in flight. */
  async settle(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.latest = this.pushed ?? '';
    await this.inFlight;
  }

  /**
   * The finish: the card replaced whole. A short 429 hold (recorded by any isolate, or answered
   * now) is waited out, up to FINISH_ATTEMPTS times: the agent's answer is in hand, and a
   * replacement run would ask the agent again. A longer hold, or the last one, is the caller's
   * (`held`: the same generation later).
   */
  private async replaceWaitingOutHolds(card: ReplyCard, text: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        const sequence = await this.takeSequence();
        await this.deps.lark.replaceCard(
          card.cardId,
          { card: cardJson(text, false), sequence },
          { deadline: new Deadline(CALL_BUDGET_MS), signal: this.deps.signal },
        );
        return;
      } catch (err) {
        const limited =
          err instanceof LarkApiError && (err.httpStatus === 429 || err.code === RATE_LIMITED_CODE);
        const waitMs = limited ? (err.retryAfterSeconds ?? 1) * 1000 : Number.POSITIVE_INFINITY;
        if (attempt >= FINISH_ATTEMPTS || waitMs > FINISH_HOLD_MAX_MS || this.deps.signal.aborted) throw err;
        // By design: a rate limit is waited out, not retried at once (the hold is recorded).
        await new Promise((r) => setTimeout(r, waitMs));
      }
    }
  }

  /**
   * The card's final state: created and sent if no writer sent it yet, then replaced whole with
   * `text` and streaming off, then recorded finished. Throws what stopped the stream.
   */
  async finish(text: string): Promise<ReplyCard> {
    await this.settle();
    if (this.fatal) throw this.fatal;
    const card = await this.ensureSent(text);
    await this.replaceWaitingOutHolds(card, text);
    await this.deps.db((q) => markFinished(q, this.deps.turn));
    if (this.pushesFailed + this.pushesRefused > 0)
      log.warn('channel_card_pushes_lost', {
        sessionId: this.deps.turn.sessionId,
        turnNo: this.deps.turn.turnNo,
        failed: this.pushesFailed,
        refused: this.pushesRefused,
      });
    this.card = { ...card, finished: true };
    return this.card;
  }
}
