/**
 * The CardKit routes (shared/reference/lark-open-api.md §6): create a card entity, stream an
 * element's content, settings, full update, batch update, and the reply that sends a card.
 * Every update passes the card's gates (cards.ts) in the order Lark is taken to use: the card
 * exists, its sequence and uuid, then the update itself, all or nothing.
 */

import { type ApiAnswer, ok, tooMany } from './answers';
import {
  applyActions,
  applySettings,
  CARD_CODES,
  CardJsonError,
  isStreaming,
  type Json,
  parseCardBody,
  parseJson,
  textElement,
} from './card-json';
import type { AcceptedOp, CardRecord, CardRoute } from './cards';
import type { EmulatorState } from './state';

export function cardError(code: number, msg: string): ApiAnswer {
  return {
    status: 400,
    body: { code, msg: `ErrMsg: ${msg};`, data: {} },
  };
}

export type CardkitRouteName = 'cardkit.create' | CardRoute;

export function cardkitRoute(
  state: EmulatorState,
  route: CardkitRouteName,
  appId: string,
  params: Record<string, string>,
  body: Json,
): ApiAnswer {
  if (route === 'cardkit.create') return createCard(state, appId, body);
  const rec = state.cards.find(appId, params.card_id ?? '', state.now());
  if (rec === CARD_CODES.cardExpired) return cardError(rec, 'card entity expired');
  if (typeof rec === 'number') return cardError(rec, 'card entity not found');
  const reset = state.cards.rateLimited(rec, route, state.now());
  if (reset !== undefined) return tooMany(reset, state.cards.config.perCardPerSecond);
  return updateCard(state, route, rec, params, body);
}

function createCard(state: EmulatorState, appId: string, body: Json): ApiAnswer {
  try {
    const rec = state.cards.create(appId, parseCardBody(body), state.now());
    return ok({ card_id: rec.card_id });
  } catch (err) {
    if (err instanceof CardJsonError) return cardError(err.code, err.message);
    throw err;
  }
}

/** The four update routes, once the card is found and within its rate. */
function updateCard(
  state: EmulatorState,
  route: CardRoute,
  rec: CardRecord,
  params: Record<string, string>,
  body: Json,
): ApiAnswer {
  const store = state.cards;
  const now = state.now();
  const uuid = typeof body?.uuid === 'string' ? body.uuid : undefined;
  const sequence = typeof body?.sequence === 'number' ? body.sequence : undefined;
  const refuse = (code: number, reason: string): ApiAnswer => {
    rec.refused.push({ route, sequence, uuid, code, reason, at: now });
    return cardError(code, reason);
  };
  const gate = store.gate(rec, body);
  if (!gate.pass && 'ignored' in gate) {
    rec.ignored.push({ route, sequence, uuid, reason: gate.ignored, at: now });
    return ok({});
  }
  if (!gate.pass) return refuse(gate.code, gate.reason);
  const op: AcceptedOp = { sequence: gate.sequence, route, at: now, ...(uuid ? { uuid } : {}) };
  try {
    const next = nextCard(store.config.contentWhenClosed, route, rec.card, params, body, op);
    store.accept(rec, op, next);
    return ok({});
  } catch (err) {
    if (err instanceof CardJsonError) return refuse(err.code, err.message);
    throw err;
  }
}

/** The card after one update, on a copy: a refused update leaves the card as it was. */
function nextCard(
  contentWhenClosed: 'refuse' | 'accept',
  route: CardRoute,
  card: Json,
  params: Record<string, string>,
  body: Json,
  op: AcceptedOp,
): Json {
  switch (route) {
    case 'cardkit.content': {
      if (typeof body?.content !== 'string')
        throw new CardJsonError(CARD_CODES.fieldInvalid, 'field validation failed: content');
      if (!isStreaming(card) && contentWhenClosed === 'refuse')
        throw new CardJsonError(CARD_CODES.streamingClosed, 'streaming mode is closed');
      const next = structuredClone(card);
      const el = textElement(next, params.element_id ?? '');
      const before = typeof el.content === 'string' ? el.content : '';
      op.content = body.content.startsWith(before) ? 'append' : 'replace';
      el.content = body.content;
      return next;
    }
    case 'cardkit.settings': {
      if (typeof body?.settings !== 'string')
        throw new CardJsonError(CARD_CODES.fieldInvalid, 'field validation failed: settings');
      const next = structuredClone(card);
      applySettings(next, parseJson(body.settings, 'settings'));
      return next;
    }
    case 'cardkit.update':
      return parseCardBody(body?.card);
    case 'cardkit.batch_update':
      return applyActions(card, body?.actions);
  }
}

/** The card entity a reply's content names (`{"type":"card","data":{"card_id":"…"}}`), if any. */
export function cardIdOf(msgType: unknown, content: unknown): string | undefined {
  if (msgType !== 'interactive' || typeof content !== 'string') return undefined;
  try {
    const parsed = JSON.parse(content);
    return parsed?.type === 'card' && typeof parsed.data?.card_id === 'string'
      ? parsed.data.card_id
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The reply route's check before it sends a card entity (once only, reference §6). Answers
 * the refusal, or for a re-sent card under `resend: "dedupe"` the first message's id; nothing
 * when the card may be sent.
 */
export function checkCardSend(
  state: EmulatorState,
  appId: string,
  cardId: string,
  uuid: string | undefined,
): { refuse: ApiAnswer } | { firstMessageId: string } | undefined {
  const now = state.now();
  const rec = state.cards.find(appId, cardId, now);
  if (typeof rec === 'number')
    return { refuse: cardError(CARD_CODES.cardNotSendable, `card entity ${cardId} cannot be sent`) };
  if (!rec.sent) return undefined;
  if (state.cards.config.resend === 'dedupe') {
    rec.ignored.push({ route: 'reply', uuid, reason: 'resend', at: now });
    return { firstMessageId: rec.sent.message_id };
  }
  const reason = 'the card entity was already sent';
  rec.refused.push({ route: 'reply', uuid, code: CARD_CODES.cardNotSendable, reason, at: now });
  return { refuse: cardError(CARD_CODES.cardNotSendable, reason) };
}
