/**
 * The emulator's own HTTP API under /__emulator: inspection (calls, messages, cards), fault
 * injection, the clock, the CardKit switches, and event delivery (a message's mentions:
 * `message.mention_bot`, `message.mentions`; `type: "recall"` for a user's recall). Tests inside workerd drive the emulator only through these routes.
 */

import type { ApiAnswer } from './answers';
import { configProblem } from './cards';
import {
  buildDelivery,
  type DeliveryOptions,
  messageRecalledPayload,
  messageReceivePayload,
  urlVerificationPayload,
} from './events';
import { type Fault, type FaultBook, type FaultKind, isRouteTarget, ROUTES } from './faults';
import { type AppRecord, type EmulatorState, id, type MentionRecord, type MessageRecord } from './state';

export interface CallLogEntry {
  route: string;
  /** The app behind the bearer token (authed routes only; an invalid token names none). */
  appId?: string;
  /** Token route: the app_id the token was requested for, granted or refused. */
  requestedAppId?: string;
  /** The message the call was about (reaction and reply routes). */
  messageId?: string;
  /** A reaction create's emoji_type. */
  emojiType?: string;
  /** The card the call was about (CardKit routes; a reply that sends a card; a create's new card). */
  cardId?: string;
  status: number | 'dropped';
  at: number;
}

export interface ControlDeps {
  state: EmulatorState;
  faults: FaultBook;
  calls: CallLogEntry[];
  rateLimits: { enabled: boolean };
  /** Back to a new emulator (apps, tokens, messages, cards, faults, calls, clock, rate windows). */
  reset?: () => void;
}

// biome-ignore lint/suspicious/noExplicitAny: control bodies are loose JSON from tests and the demo
type Body = any;

const json = (body: unknown, status = 200): ApiAnswer => ({ status, body });
const bad = (message: string, status = 400): ApiAnswer => json({ error: message }, status);

export async function control(
  deps: ControlDeps,
  method: string,
  parts: string[],
  query: URLSearchParams,
  body: Body,
) {
  const { state, faults } = deps;
  const [head, arg, sub] = parts;
  if (head === 'reset' && method === 'POST' && !arg && deps.reset) {
    deps.reset();
    return json({ reset: true });
  }
  if (head === 'apps' && method === 'POST' && !arg) {
    if (!body?.app_id || !body?.app_secret || !body?.verification_token)
      return bad('app_id, app_secret, verification_token required');
    return json(state.registerApp(body));
  }
  if (head === 'apps' && arg && sub === 'expire-tokens' && method === 'POST')
    return json({ revoked: state.revokeAppTokens(arg) });
  if (head === 'apps' && arg && sub === 'rotate-secret' && method === 'POST') {
    if (typeof body?.app_secret !== 'string' || !body.app_secret) return bad('app_secret required');
    const revoked = state.rotateSecret(arg, body.app_secret, body?.revoke_tokens === true);
    // The new secret is never echoed: the answer says what happened, not what it is.
    return revoked === undefined ? bad('unknown app_id', 404) : json({ app_id: arg, revoked });
  }
  if (head === 'clock') {
    if (method === 'POST') state.offsetMs += Number(body?.advanceMs ?? 0);
    return json({ now: state.now(), offsetMs: state.offsetMs });
  }
  if (head === 'rate-limits' && method === 'POST') {
    deps.rateLimits.enabled = Boolean(body?.enabled);
    return json(deps.rateLimits);
  }
  if (head === 'faults' && arg === 'release' && method === 'POST')
    return json({ released: faults.release() });
  if (head === 'faults' && arg === 'held' && method === 'POST') {
    const route = String(body?.route ?? '*');
    if (!isRouteTarget(route)) return bad(`route one of ${ROUTES.join(', ')}, cardkit.* or *`);
    const count = Number(body?.count ?? 1);
    const timeoutMs = Math.min(Number(body?.timeoutMs ?? 10_000), 60_000);
    if (!(await faults.untilHeld(route, count, timeoutMs)))
      return bad(`fewer than ${count} ${route} call(s) held after ${timeoutMs} ms`, 408);
    return json({ held: faults.heldCalls() });
  }
  if (head === 'faults') {
    if (method === 'DELETE') faults.clear();
    if (method === 'POST') {
      const f = body as Fault;
      const kinds: FaultKind[] = ['latency', '5xx', '429', 'expired_token', 'lost_response', 'hold'];
      if (!isRouteTarget(f?.route) || !kinds.includes(f?.kind))
        return bad(`route one of ${ROUTES.join(', ')}, cardkit.* or *; kind one of ${kinds.join(', ')}`);
      faults.add({ ...f, times: Number(f.times ?? 1) });
    }
    return json({ faults: faults.list(), held: faults.heldCalls() });
  }
  if (head === 'calls') {
    if (method === 'DELETE') deps.calls.length = 0;
    const route = query.get('route');
    const messageId = query.get('message_id');
    const cardId = query.get('card_id');
    const calls = deps.calls.filter(
      (c) =>
        (!route || c.route === route) &&
        (!messageId || c.messageId === messageId) &&
        (!cardId || c.cardId === cardId),
    );
    const counts: Record<string, number> = {};
    for (const c of deps.calls) counts[c.route] = (counts[c.route] ?? 0) + 1;
    return json({ counts, calls });
  }
  if (head === 'cardkit') return cardkitSettings(state, method, body);
  if (head === 'cards' && method === 'GET') return cards(state, arg, query);
  if (head === 'messages') return messages(state, method, arg, sub, body);
  if (head === 'events' && method === 'POST') return deliver(state, body);
  return bad('unknown emulator route', 404);
}

/** `GET cardkit` / `POST cardkit {…}`: the switches for Lark's unconfirmed CardKit behaviour (cards.ts). */
function cardkitSettings(state: EmulatorState, method: string, body: Body): ApiAnswer {
  if (method === 'POST') {
    const problem = configProblem(body);
    if (problem) return bad(problem);
    Object.assign(state.cards.config, body);
  }
  return json(state.cards.config);
}

/** `GET cards/:card_id`, or `GET cards?message_id=&app_id=` (message_id: the card's message or the one it answered). */
function cards(state: EmulatorState, cardId: string | undefined, query: URLSearchParams): ApiAnswer {
  const store = state.cards;
  if (cardId) {
    const rec = store.cards.get(cardId);
    return rec ? json({ card: store.view(rec) }) : bad('no such card', 404);
  }
  const appId = query.get('app_id');
  const messageId = query.get('message_id');
  const items = [...store.cards.values()]
    .filter((c) => !appId || c.app_id === appId)
    .filter((c) => !messageId || c.sent?.message_id === messageId || c.sent?.reply_to === messageId)
    .map((c) => store.view(c));
  return json({ items });
}

function messages(
  state: EmulatorState,
  method: string,
  messageId: string | undefined,
  sub: string | undefined,
  body: Body,
) {
  if (!messageId && method === 'POST') {
    const sender = body?.sender_app_id
      ? { id: body.sender_app_id, id_type: 'app_id' as const, sender_type: 'app' as const }
      : { id: body?.sender_open_id ?? id('ou_'), id_type: 'open_id' as const, sender_type: 'user' as const };
    return json(state.createMessage({ ...pick(body), sender }));
  }
  const msg = state.messages.get(messageId ?? '');
  if (!msg) return bad('no such message', 404);
  if (!sub && method === 'GET')
    return json({
      message: msg,
      reactions: state.reactions.get(msg.message_id) ?? [],
      replies: state.repliesTo(msg.message_id),
    });
  if (sub === 'recall' && method === 'POST') {
    msg.recalled = true;
    return json(msg);
  }
  if (sub === 'replies') return json({ items: state.repliesTo(msg.message_id) });
  if (sub === 'reactions' && method === 'GET')
    return json({ items: state.reactions.get(msg.message_id) ?? [] });
  if (sub === 'reactions' && method === 'POST') {
    const emoji = String(body?.emoji_type ?? 'THUMBSUP');
    // `operator_type` + `operator_id` name the operator exactly (an app reaction whose
    // operator_id is empty, as a malformed or redacted listing can show); else app or user.
    const operator =
      body?.operator_type === 'app' || body?.operator_type === 'user'
        ? { operator_id: String(body.operator_id ?? ''), operator_type: body.operator_type }
        : body?.app_id
          ? { operator_id: String(body.app_id), operator_type: 'app' as const }
          : { operator_id: String(body?.user_open_id ?? id('ou_')), operator_type: 'user' as const };
    return json(state.addReaction(msg.message_id, emoji, operator));
  }
  return bad('unknown message route', 404);
}

/**
 * The mentions of a message a delivery creates: `mention_bot: true` mentions the app's own bot
 * (first, as `@_user_1`), `mentions: [{ open_id, name? }]` anyone else, in order. The text
 * is the caller's: Lark puts each key where the mention is (`@_user_1 hello`).
 */
function mentionsOf(app: AppRecord, m: Body): MentionRecord[] {
  const people: { open_id: string; name: string }[] = [];
  if (m?.mention_bot === true) people.push({ open_id: app.bot_open_id, name: app.app_name ?? 'bot' });
  for (const p of Array.isArray(m?.mentions) ? m.mentions : [])
    if (typeof p?.open_id === 'string') people.push({ open_id: p.open_id, name: String(p.name ?? 'user') });
  return people.map((p, i) => ({
    key: `@_user_${i + 1}`,
    id: { open_id: p.open_id, union_id: p.open_id.replace(/^ou_/, 'on_'), user_id: p.open_id.slice(3, 11) },
    name: p.name,
    tenant_key: 'tenant_emulator',
  }));
}

function pick(body: Body): Partial<MessageRecord> & { text?: string } {
  const out: Partial<MessageRecord> & { text?: string } = {};
  for (const k of [
    'message_id',
    'chat_id',
    'chat_type',
    'root_id',
    'parent_id',
    'thread_id',
    'text',
    'content',
  ] as const)
    if (typeof body?.[k] === 'string') (out as Record<string, string>)[k] = body[k];
  return out;
}

/**
 * Builds a signed (and, with an Encrypt Key, encrypted) delivery. `deliver: "return"` hands
 * the request back for a test to submit itself (workerd cannot be called from here);
 * `deliver: "post"` sends it to `url` like Lark and reports the answer.
 */
async function deliver(state: EmulatorState, body: Body): Promise<ApiAnswer> {
  const app = state.apps.get(String(body?.app_id ?? ''));
  if (!app) return bad('unknown app_id', 404);
  const now = state.now();
  let payload: unknown;
  let message: MessageRecord | undefined;
  if (body.type === 'url_verification') payload = urlVerificationPayload(app, body.token);
  else if (body.type === 'custom') payload = body.payload;
  else if (body.type === 'recall') {
    // The user recalls a message: a known one is withdrawn in the emulator's world too (unless
    // `withdraw: false`: the event alone, for a test that orders the withdrawal itself); an
    // unknown id (`message_id` + `chat_id`) is sent as given (a recall of a message never seen).
    message = body.message_id ? state.messages.get(body.message_id) : undefined;
    if (message && body.withdraw !== false) message.recalled = true;
    if (!message && (typeof body.message_id !== 'string' || typeof body.chat_id !== 'string'))
      return bad('recall: message_id of a known message, or message_id and chat_id');
    payload = messageRecalledPayload(
      app,
      {
        message_id: message?.message_id ?? body.message_id,
        chat_id: message?.chat_id ?? body.chat_id,
        recall_type: body.recall_type,
      },
      now,
      { eventId: body.event_id, token: body.token, shape: body.shape === 'nested' ? 'nested' : 'flat' },
    );
  } else {
    message = body.message_id ? state.messages.get(body.message_id) : undefined;
    if (!message) {
      const m = body.message ?? {};
      const sender = m.sender_app_id
        ? { id: m.sender_app_id, id_type: 'app_id' as const, sender_type: 'app' as const }
        : { id: m.sender_open_id ?? id('ou_'), id_type: 'open_id' as const, sender_type: 'user' as const };
      message = state.createMessage({ ...pick(m), sender, mentions: mentionsOf(app, m) });
    }
    payload = messageReceivePayload(app, message, now, { eventId: body.event_id, token: body.token });
  }
  const opts: DeliveryOptions = {
    timestampSec: body.timestampSec,
    pretty: body.pretty,
    plain: body.plain,
    signWithKey: body.signWithKey,
  };
  const request = buildDelivery(app, payload, now, opts);
  const info = {
    payload,
    event_id: (payload as { header?: { event_id?: string } }).header?.event_id,
    message_id: message?.message_id,
    challenge: (payload as { challenge?: string }).challenge,
  };
  if (body.deliver !== 'post') return json({ ...info, request });
  if (typeof body.url !== 'string') return bad('url required for deliver: post');
  const started = Date.now();
  const res = await fetch(body.url, { method: 'POST', headers: request.headers, body: request.body });
  return json({ ...info, status: res.status, response: await res.text(), latencyMs: Date.now() - started });
}
