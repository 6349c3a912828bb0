/**
 * Card JSON 2.0 as the CardKit routes take it (shared/reference/lark-open-api.md §6): checking a
 * card, finding its elements by `element_id`, settings and batch_update actions. Pure functions
 * on plain objects; the card store (cards.ts) owns the records. Error codes are in CARD_CODES.
 */

// biome-ignore lint/suspicious/noExplicitAny: card JSON is open-ended; only the fields read here are checked
export type Json = any;

/**
 * The codes the CardKit routes answer with. Lark documents none of them (reference §6,
 * UNCONFIRMED): 300317, 300309, 300313 and 300301 are the codes third-party clients report
 * from Lark for these cases; the others are the emulator's own picks. The stale-sequence code
 * can be changed through the control API (`POST /__emulator/cardkit {staleSequenceCode}`).
 */
export const CARD_CODES = {
  /** Generic request field validation (sequence out of range, a missing field). */
  fieldInvalid: 99992402,
  /** Card JSON unusable: not JSON, schema ≠ "2.0", `config.update_multi: false`, an unknown action. */
  cardInvalid: 300300,
  /** Two elements share an element_id (third-party reports). */
  duplicateElement: 300301,
  /** No card entity with that id for this app (emulator's pick). */
  cardNotFound: 300304,
  /** The card entity is older than its 14-day life (emulator's pick). */
  cardExpired: 300305,
  /** Element content pushed while streaming mode is off (third-party reports). */
  streamingClosed: 300309,
  /** No element with that element_id (third-party reports). */
  elementNotFound: 300313,
  /** Default stale-sequence code: "sequence number compare failed" (third-party reports). */
  staleSequence: 300317,
  /** Reply with a card entity that is unknown, expired or already sent (emulator's pick). */
  cardNotSendable: 230099,
} as const;

export class CardJsonError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

const isObject = (v: unknown): v is Record<string, Json> => typeof v === 'object' && v !== null;

/** A `{type: "card_json", data: "<card JSON>"}` body (create and full update), checked. */
export function parseCardBody(body: Json): Json {
  if (body?.type !== 'card_json')
    throw new CardJsonError(CARD_CODES.fieldInvalid, 'field validation failed: type must be card_json');
  if (typeof body.data !== 'string')
    throw new CardJsonError(CARD_CODES.fieldInvalid, 'field validation failed: data must be a string');
  const card = parseJson(body.data, 'data');
  checkCard(card);
  return card;
}

export function parseJson(text: string, field: string): Json {
  try {
    return JSON.parse(text);
  } catch {
    throw new CardJsonError(CARD_CODES.cardInvalid, `${field} is not valid JSON`);
  }
}

/** Schema 2.0, update_multi not false, unique element ids. */
export function checkCard(card: Json): void {
  if (!isObject(card) || card.schema !== '2.0')
    throw new CardJsonError(CARD_CODES.cardInvalid, 'card json must be schema 2.0');
  if (card.config?.update_multi === false)
    throw new CardJsonError(CARD_CODES.cardInvalid, 'config.update_multi must not be false');
  elementsById(card);
}

export const isStreaming = (card: Json): boolean => card?.config?.streaming_mode === true;

/** Every element with an element_id, at any depth under `body`; throws on a duplicate id. */
export function elementsById(card: Json): Map<string, Json> {
  const out = new Map<string, Json>();
  walk(card?.body, (el) => {
    if (typeof el.element_id !== 'string') return;
    if (out.has(el.element_id))
      throw new CardJsonError(CARD_CODES.duplicateElement, `duplicate element_id: ${el.element_id}`);
    out.set(el.element_id, el);
  });
  return out;
}

function walk(node: Json, visit: (el: Record<string, Json>) => void): void {
  if (Array.isArray(node)) for (const n of node) walk(n, visit);
  else if (isObject(node)) {
    visit(node);
    for (const v of Object.values(node)) walk(v, visit);
  }
}

/** The text an element shows: `content` (markdown, plain_text) or `text.content`. */
export function elementText(el: Json): string | undefined {
  if (typeof el?.content === 'string') return el.content;
  if (typeof el?.text?.content === 'string') return el.text.content;
  return undefined;
}

/** The element the content route may stream into: markdown or plain_text (Lark's streaming components). */
export function textElement(card: Json, elementId: string): Json {
  const el = elementsById(card).get(elementId);
  if (!el) throw new CardJsonError(CARD_CODES.elementNotFound, `not find elementID : ${elementId}`);
  if (el.tag !== 'markdown' && el.tag !== 'plain_text')
    throw new CardJsonError(CARD_CODES.fieldInvalid, `element ${elementId} is not a text element`);
  return el;
}

/** `{config?, card_link?}` merged into the card (settings route, partial_update_setting). */
export function applySettings(card: Json, settings: Json): void {
  if (!isObject(settings)) throw new CardJsonError(CARD_CODES.fieldInvalid, 'settings must be an object');
  if (settings.config !== undefined) {
    if (!isObject(settings.config)) throw new CardJsonError(CARD_CODES.fieldInvalid, 'settings.config');
    card.config = { ...(card.config ?? {}), ...settings.config };
  }
  if (settings.card_link !== undefined) card.card_link = settings.card_link;
  checkCard(card);
}

/** batch_update: all actions on a copy, returned only when every one applies (all or nothing). */
export function applyActions(card: Json, actions: Json): Json {
  const list = typeof actions === 'string' ? parseJson(actions, 'actions') : actions;
  if (!Array.isArray(list) || list.length === 0)
    throw new CardJsonError(CARD_CODES.fieldInvalid, 'field validation failed: actions');
  const next = structuredClone(card);
  for (const a of list) applyAction(next, a);
  checkCard(next);
  return next;
}

function applyAction(card: Json, a: Json): void {
  const p = a?.params ?? {};
  switch (a?.action) {
    case 'partial_update_setting':
      applySettings(card, typeof p.settings === 'string' ? parseJson(p.settings, 'settings') : p.settings);
      return;
    case 'add_elements':
      addElements(card, p);
      return;
    case 'delete_elements':
      if (!Array.isArray(p.element_ids)) throw new CardJsonError(CARD_CODES.fieldInvalid, 'element_ids');
      for (const elementId of p.element_ids) {
        const { list, index } = locate(card, String(elementId));
        list.splice(index, 1);
      }
      return;
    case 'partial_update_element': {
      const { list, index } = locate(card, String(p.element_id));
      if (!isObject(p.partial_element)) throw new CardJsonError(CARD_CODES.fieldInvalid, 'partial_element');
      list[index] = { ...list[index], ...p.partial_element, element_id: p.element_id };
      return;
    }
    case 'update_element': {
      const { list, index } = locate(card, String(p.element_id));
      if (!isObject(p.element)) throw new CardJsonError(CARD_CODES.fieldInvalid, 'element');
      list[index] = { ...p.element, element_id: p.element_id };
      return;
    }
    default:
      throw new CardJsonError(CARD_CODES.cardInvalid, `unknown action: ${String(a?.action)}`);
  }
}

function addElements(card: Json, p: Json): void {
  if (!Array.isArray(p.elements)) throw new CardJsonError(CARD_CODES.fieldInvalid, 'elements');
  const type = p.type ?? 'append';
  if (type === 'append') {
    const target = p.target_element_id ? elementsById(card).get(String(p.target_element_id)) : card.body;
    if (!target)
      throw new CardJsonError(CARD_CODES.elementNotFound, `not find elementID : ${p.target_element_id}`);
    target.elements = [...(target.elements ?? []), ...p.elements];
    return;
  }
  if (type !== 'insert_before' && type !== 'insert_after')
    throw new CardJsonError(CARD_CODES.fieldInvalid, `add_elements type: ${String(type)}`);
  const { list, index } = locate(card, String(p.target_element_id));
  list.splice(type === 'insert_before' ? index : index + 1, 0, ...p.elements);
}

/** The array holding an element and its place in it. */
function locate(card: Json, elementId: string): { list: Json[]; index: number } {
  let found: { list: Json[]; index: number } | undefined;
  const search = (node: Json): void => {
    if (found) return;
    if (Array.isArray(node)) {
      const index = node.findIndex((n) => isObject(n) && n.element_id === elementId);
      if (index >= 0) found = { list: node, index };
      else for (const n of node) search(n);
    } else if (isObject(node)) for (const v of Object.values(node)) search(v);
  };
  search(card?.body);
  if (!found) throw new CardJsonError(CARD_CODES.elementNotFound, `not find elementID : ${elementId}`);
  return found;
}
