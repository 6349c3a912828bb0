/**
 * CardKit card entities (shared/reference/lark-open-api.md §6): what each card is now, what was
 * accepted, refused or ignored, and the gates every update passes (sequence, uuid, per-card
 * rate). Where Lark's behaviour is UNCONFIRMED the choice is a switch in CardKitConfig, set
 * through `POST /__emulator/cardkit`, so the service can be tested against either answer.
 */
import { randomInt } from 'node:crypto';
import { CARD_CODES, elementsById, elementText, isStreaming, type Json } from './card-json';

export const SEQUENCE_MAX = 2 ** 31 - 1;
export const CARD_LIFETIME_MS = 14 * 24 * 3600_000;

export type CardRoute = 'cardkit.content' | 'cardkit.settings' | 'cardkit.update' | 'cardkit.batch_update';
export const CARD_UPDATE_ROUTES: readonly string[] = [
  'cardkit.content',
  'cardkit.settings',
  'cardkit.update',
  'cardkit.batch_update',
];

export interface CardKitConfig {
  /** The code a sequence not above the card's last accepted one is refused with. */
  staleSequenceCode: number;
  /** A sequence equal to the last accepted one: refused (stale) or answered success, nothing applied. */
  equalSequence: 'refuse' | 'ignore';
  /** A sent card entity sent again (another or no uuid): refused, or answered with the first message. */
  resend: 'refuse' | 'dedupe';
  /** An update repeating a uuid the card already accepted: success with nothing applied, or judged by its sequence alone. */
  updateUuid: 'dedupe' | 'ignore';
  /** Element content while streaming mode is off: refused (300309) or applied. */
  contentWhenClosed: 'refuse' | 'accept';
  /** Update operations a card takes in any 1000 ms (the four update routes together); 0 turns it off. */
  perCardPerSecond: number;
  /** Lark's 50/s and 1000/min per app: one budget for all CardKit routes, or one per route. */
  appLimitScope: 'cardkit' | 'route';
}

export const defaultCardKitConfig = (): CardKitConfig => ({
  staleSequenceCode: CARD_CODES.staleSequence,
  equalSequence: 'refuse',
  resend: 'refuse',
  updateUuid: 'dedupe',
  contentWhenClosed: 'refuse',
  perCardPerSecond: 10,
  appLimitScope: 'cardkit',
});

export interface AcceptedOp {
  sequence: number;
  route: CardRoute;
  at: number;
  uuid?: string;
  /** Content route: the text grew from the last one (the client types out the rest) or was replaced. */
  content?: 'append' | 'replace';
}

export interface RefusedOp {
  route: CardRoute | 'reply';
  sequence?: number;
  uuid?: string;
  code: number;
  reason: string;
  at: number;
}

/** Answered success with nothing applied: a repeated uuid, an equal sequence, a re-sent card. */
export interface IgnoredOp {
  route: CardRoute | 'reply';
  sequence?: number;
  uuid?: string;
  reason: 'uuid' | 'equal_sequence' | 'resend';
  at: number;
}

export interface CardSend {
  message_id: string;
  /** The message the card answered. */
  reply_to: string;
  uuid?: string;
  at: number;
}

export interface CardRecord {
  card_id: string;
  app_id: string;
  created_at: number;
  card: Json;
  /** When streaming mode went off (or the card was created without it). */
  finished_at?: number;
  sent?: CardSend;
  sequences: AcceptedOp[];
  refused: RefusedOp[];
  ignored: IgnoredOp[];
  /** Times of the operations inside the per-card rate window. */
  window: number[];
}

/** What `GET /__emulator/cards/:card_id` answers. */
export interface CardView {
  card_id: string;
  app_id: string;
  created_at: number;
  expires_at: number;
  streaming: boolean;
  /** Streaming mode is off: the chat shows the final card, no "generating…" preview. */
  finished: boolean;
  finished_at: number | null;
  sent: CardSend | null;
  /** Text of every element with an element_id that shows text. */
  elements: Record<string, { tag: string; text: string | null }>;
  last_sequence: number;
  sequences: AcceptedOp[];
  refused: RefusedOp[];
  ignored: IgnoredOp[];
  card: Json;
}

/** A verdict on an update's sequence and uuid, before the update itself is looked at. */
export type Gate =
  | { pass: true; sequence: number }
  | { pass: false; ignored: IgnoredOp['reason'] }
  | { pass: false; code: number; reason: string };

export class CardStore {
  readonly cards = new Map<string, CardRecord>();
  config: CardKitConfig = defaultCardKitConfig();

  create(appId: string, card: Json, now: number): CardRecord {
    // Lark's ids are 19 digits; the reference says 1–20 characters.
    let cardId: string;
    do cardId = `7${String(randomInt(1e9)).padStart(9, '0')}${String(randomInt(1e9)).padStart(9, '0')}`;
    while (this.cards.has(cardId));
    const rec: CardRecord = {
      card_id: cardId,
      app_id: appId,
      created_at: now,
      card,
      finished_at: isStreaming(card) ? undefined : now,
      sequences: [],
      refused: [],
      ignored: [],
      window: [],
    };
    this.cards.set(cardId, rec);
    return rec;
  }

  /** The app's card, or a refusal code: another app's card is as unknown as a missing one. */
  find(appId: string, cardId: string, now: number): CardRecord | number {
    const rec = this.cards.get(cardId);
    if (!rec || rec.app_id !== appId) return CARD_CODES.cardNotFound;
    if (now >= rec.created_at + CARD_LIFETIME_MS) return CARD_CODES.cardExpired;
    return rec;
  }

  /**
   * The per-card rate: seconds until the window has room (and the refusal recorded), or
   * undefined with this operation counted. A window of the last 1000 ms, not a fixed second:
   * a writer within it is within a fixed-second limit too.
   */
  rateLimited(rec: CardRecord, route: CardRoute, now: number): number | undefined {
    const limit = this.config.perCardPerSecond;
    if (limit <= 0) return undefined;
    rec.window = rec.window.filter((t) => t > now - 1000);
    if (rec.window.length < limit) {
      rec.window.push(now);
      return undefined;
    }
    rec.refused.push({ route, code: 99991400, reason: 'card rate limit', at: now });
    return Math.max(1, Math.ceil((rec.window[0]! + 1000 - now) / 1000));
  }

  /** Sequence in 1…2³¹−1 and above the last accepted one, uuid ≤ 64 chars; a repeated uuid is answered, not applied. */
  gate(rec: CardRecord, body: Json): Gate {
    const sequence = body?.sequence;
    if (typeof sequence !== 'number' || !Number.isInteger(sequence) || sequence > SEQUENCE_MAX)
      return { pass: false, code: CARD_CODES.fieldInvalid, reason: 'field validation failed: sequence' };
    if (body.uuid !== undefined && (typeof body.uuid !== 'string' || body.uuid.length > 64))
      return { pass: false, code: CARD_CODES.fieldInvalid, reason: 'field validation failed: uuid' };
    const uuid = body.uuid as string | undefined;
    if (uuid && this.config.updateUuid === 'dedupe' && rec.sequences.some((op) => op.uuid === uuid))
      return { pass: false, ignored: 'uuid' };
    const last = lastSequence(rec);
    if (sequence === last && last > 0 && this.config.equalSequence === 'ignore')
      return { pass: false, ignored: 'equal_sequence' };
    // 0 and negatives land here too: third-party clients report 300317 for sequence 0.
    if (sequence <= last || sequence < 1)
      return { pass: false, code: this.config.staleSequenceCode, reason: 'sequence number compare failed' };
    return { pass: true, sequence };
  }

  /** Records an applied update; `next` is the card after it. */
  accept(rec: CardRecord, op: AcceptedOp, next: Json): void {
    const wasStreaming = isStreaming(rec.card);
    rec.card = next;
    rec.sequences.push(op);
    if (wasStreaming && !isStreaming(next)) rec.finished_at = op.at;
    if (isStreaming(next)) rec.finished_at = undefined;
  }

  view(rec: CardRecord): CardView {
    const elements: CardView['elements'] = {};
    for (const [elementId, el] of elementsById(rec.card))
      elements[elementId] = { tag: String(el.tag ?? ''), text: elementText(el) ?? null };
    return {
      card_id: rec.card_id,
      app_id: rec.app_id,
      created_at: rec.created_at,
      expires_at: rec.created_at + CARD_LIFETIME_MS,
      streaming: isStreaming(rec.card),
      finished: !isStreaming(rec.card),
      finished_at: rec.finished_at ?? null,
      sent: rec.sent ?? null,
      elements,
      last_sequence: lastSequence(rec),
      sequences: rec.sequences,
      refused: rec.refused,
      ignored: rec.ignored,
      card: rec.card,
    };
  }
}

export const lastSequence = (rec: CardRecord): number => rec.sequences.at(-1)?.sequence ?? 0;

/** Checks a partial config from the control API; returns what is wrong, or undefined. */
export function configProblem(patch: Json): string | undefined {
  const choices: Record<string, readonly string[]> = {
    equalSequence: ['refuse', 'ignore'],
    resend: ['refuse', 'dedupe'],
    updateUuid: ['dedupe', 'ignore'],
    contentWhenClosed: ['refuse', 'accept'],
    appLimitScope: ['cardkit', 'route'],
  };
  for (const [k, v] of Object.entries(patch ?? {})) {
    if (k === 'staleSequenceCode' || k === 'perCardPerSecond') {
      if (!Number.isInteger(v) || (v as number) < 0) return `${k} must be a non-negative integer`;
    } else if (!choices[k]) return `unknown setting ${k}`;
    else if (!choices[k].includes(v as string)) return `${k} one of ${choices[k].join(', ')}`;
  }
  return undefined;
}
