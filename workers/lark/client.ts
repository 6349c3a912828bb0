import type { z } from 'zod';
import { type Clock, type Deadline, systemClock } from '../clock';
import { registerSecret } from '../log';
import { metric, since } from '../metrics';
import { isAllowedApiBase } from './api-base';
import type { ApiErrorLog } from './api-errors';
import {
  classify,
  LarkApiError,
  RATE_LIMITED_CODE,
  RETRYABLE_CODES,
  retryAfter,
  TOKEN_CODES,
} from './errors';
import type { LarkRoute, RateGate } from './rate-limits';
import {
  ApiEnvelope,
  BotInfoResponse,
  CardUpdateResponse,
  CreateCardResponse,
  DeleteMessageResponse,
  type Reaction,
  ReactionListResponse,
  type ReactionPage,
  ReactionResponse,
  ReplyResponse,
  type SentMessage,
  TenantTokenResponse,
} from './schemas';
import { cachedToken, dropToken, storeToken, tokenCacheKey } from './token-cache';

export interface LarkCredentials {
  /** Open API host, e.g. https://open.larksuite.com or https://open.feishu.cn. */
  baseUrl: string;
  appId: string;
  appSecret: string;
}

/** Every call runs inside the caller's budget; `signal` adds an outside cancellation. */
export interface CallOptions {
  deadline: Deadline;
  signal?: AbortSignal;
}

export interface ReplyInput {
  /** Lark's `content`: a JSON string, e.g. JSON.stringify({ text: 'hi' }). */
  content: string;
  msgType?: string;
  replyInThread?: boolean;
  /** Idempotency key (≤ 50 chars): Lark sends at most one message per uuid per hour. */
  uuid: string;
}

/** One HTTP call never waits longer than this, whatever budget is left. */
const MAX_CALL_MS = 10_000;

/** The token endpoint's route in the rate gate. */
const TOKEN_ROUTE: LarkRoute = 'auth.tenant_access_token';

/**
 * Lark Open API over `fetch`, for workerd and Node alike. Tenant tokens are cached per app
 * (token-cache.ts); a 99991661/99991663 answer drops the token and retries exactly once.
 * Failures are `LarkApiError` with a `kind` the caller switches on. With a `rateGate`
 * (lark/rate-limits.ts), no API call is sent while its route is held by a recorded 429
 * reset (a `notSent` 99991400 failure instead), and every 429 reset is recorded; the token
 * endpoint is one of those routes (a cached token is used whatever its hold). Every call the
 * gate lets through is counted in the app's calls of the day (lark/call-counts.ts).
 */
export class LarkClient {
  private readonly base: string;
  private readonly fetchFn: typeof fetch;
  private readonly clock: Clock;
  private readonly gate: RateGate | undefined;
  private readonly errors: ApiErrorLog | undefined;

  constructor(
    private readonly creds: LarkCredentials,
    opts: { fetch?: typeof fetch; clock?: Clock; rateGate?: RateGate; errorLog?: ApiErrorLog } = {},
  ) {
    this.base = creds.baseUrl.replace(/\/+$/, '');
    // Wherever the app secret came from (installation, snapshot, test), log.ts never prints it.
    registerSecret(creds.appSecret);
    this.fetchFn = opts.fetch ?? ((input, init) => fetch(input, init));
    this.clock = opts.clock ?? systemClock;
    this.gate = opts.rateGate;
    this.errors = opts.errorLog;
  }

  createReaction(messageId: string, emojiType: string, call: CallOptions): Promise<Reaction> {
    const path = `/open-apis/im/v1/messages/${enc(messageId)}/reactions`;
    return this.authed(
      'reactions.create',
      'POST',
      path,
      { reaction_type: { emoji_type: emojiType } },
      ReactionResponse,
      call,
    ).then((r) => r.data);
  }

  deleteReaction(messageId: string, reactionId: string, call: CallOptions): Promise<Reaction> {
    const path = `/open-apis/im/v1/messages/${enc(messageId)}/reactions/${enc(reactionId)}`;
    return this.authed('reactions.delete', 'DELETE', path, undefined, ReactionResponse, call).then(
      (r) => r.data,
    );
  }

  listReactions(
    messageId: string,
    query: { reactionType?: string; pageToken?: string; pageSize?: number },
    call: CallOptions,
  ): Promise<ReactionPage> {
    const params = new URLSearchParams();
    if (query.reactionType) params.set('reaction_type', query.reactionType);
    if (query.pageToken) params.set('page_token', query.pageToken);
    params.set('page_size', String(Math.min(50, Math.max(1, query.pageSize ?? 50))));
    const path = `/open-apis/im/v1/messages/${enc(messageId)}/reactions?${params}`;
    return this.authed('reactions.list', 'GET', path, undefined, ReactionListResponse, call).then(
      (r) => r.data,
    );
  }

  replyMessage(messageId: string, input: ReplyInput, call: CallOptions): Promise<SentMessage> {
    const path = `/open-apis/im/v1/messages/${enc(messageId)}/reply`;
    const body = {
      content: input.content,
      msg_type: input.msgType ?? 'text',
      reply_in_thread: input.replyInThread ?? false,
      uuid: input.uuid,
    };
    return this.authed('reply', 'POST', path, body, ReplyResponse, call).then((r) => r.data);
  }

  /**
   * Deletes (recalls) a message this app sent: `DELETE /open-apis/im/v1/messages/:message_id`.
   * Success is the envelope's code 0; a message already gone answers an already-gone code.
   */
  deleteMessage(messageId: string, call: CallOptions): Promise<void> {
    const path = `/open-apis/im/v1/messages/${enc(messageId)}`;
    return this.authed('messages.delete', 'DELETE', path, undefined, DeleteMessageResponse, call).then(
      () => undefined,
    );
  }

  /** CardKit: a card entity from card JSON 2.0 (reference §6); sent later by its id, once. */
  createCard(card: object, call: CallOptions): Promise<string> {
    const body = { type: 'card_json', data: JSON.stringify(card) };
    return this.authed(
      'cardkit.create',
      'POST',
      '/open-apis/cardkit/v1/cards',
      body,
      CreateCardResponse,
      call,
    ).then((r) => r.data.card_id);
  }

  /**
   * CardKit: an element's whole text (Lark types out the rest when the old text is a prefix).
   * `sequence` must exceed every sequence used on the card before (card-stream.ts reserves them).
   */
  setCardElementText(
    cardId: string,
    elementId: string,
    input: { content: string; sequence: number },
    call: CallOptions,
  ): Promise<void> {
    const path = `/open-apis/cardkit/v1/cards/${enc(cardId)}/elements/${enc(elementId)}/content`;
    const body = {
      content: input.content,
      sequence: input.sequence,
      uuid: `s${input.sequence}_${cardId}`.slice(0, 64),
    };
    return this.authed('cardkit.update', 'PUT', path, body, CardUpdateResponse, call).then(() => undefined);
  }

  /** CardKit: the card replaced whole (the finish: final text, streaming off), at `sequence`. */
  replaceCard(cardId: string, input: { card: object; sequence: number }, call: CallOptions): Promise<void> {
    const path = `/open-apis/cardkit/v1/cards/${enc(cardId)}`;
    const body = {
      card: { type: 'card_json', data: JSON.stringify(input.card) },
      sequence: input.sequence,
      uuid: `f${input.sequence}_${cardId}`.slice(0, 64),
    };
    return this.authed('cardkit.update', 'PUT', path, body, CardUpdateResponse, call).then(() => undefined);
  }

  /** CardKit: streaming mode on or off, the card's content unchanged, at `sequence`. */
  setCardStreaming(
    cardId: string,
    input: { streaming: boolean; sequence: number },
    call: CallOptions,
  ): Promise<void> {
    const path = `/open-apis/cardkit/v1/cards/${enc(cardId)}/settings`;
    const body = {
      settings: JSON.stringify({ config: { streaming_mode: input.streaming } }),
      sequence: input.sequence,
      uuid: `m${input.sequence}_${cardId}`.slice(0, 64),
    };
    return this.authed('cardkit.update', 'PATCH', path, body, CardUpdateResponse, call).then(() => undefined);
  }

  /** The bot's own open_id (reference §6 "Mentions"): what a message @-mentioning the bot carries. */
  botOpenId(call: CallOptions): Promise<string> {
    return this.authed('bot.info', 'GET', '/open-apis/bot/v3/info', undefined, BotInfoResponse, call).then(
      (r) => r.bot.open_id,
    );
  }

  /** The cached tenant token, fetched when missing or inside the safety margin. */
  async tenantToken(call: CallOptions): Promise<string> {
    const key = tokenCacheKey(this.base, this.creds.appId);
    const hit = cachedToken(key, this.clock);
    if (hit) return hit;
    // Admin input is refused already (workers/lark/api-base.ts); this also covers rows and
    // credential snapshots stored before that rule. Retrying cannot make the host https.
    if (!isAllowedApiBase(this.base))
      throw new LarkApiError('permanent', 0, 0, 'api_base is not https: the app secret is not sent there');
    const body = { app_id: this.creds.appId, app_secret: this.creds.appSecret };
    // Only a fetch is gated: a cached token is used whatever the token endpoint's hold.
    await this.holdBack(TOKEN_ROUTE, 'POST /open-apis/auth/v3/tenant_access_token/internal');
    const res = await this.send(
      'POST',
      '/open-apis/auth/v3/tenant_access_token/internal',
      body,
      undefined,
      call,
    );
    const parsed = await this.parseRecordingReset(TOKEN_ROUTE, res, TenantTokenResponse);
    storeToken(key, parsed.tenant_access_token, parsed.expire, this.clock);
    return parsed.tenant_access_token;
  }

  /**
   * A call that failed at Lark (or on the way) is told to the error log (lark/api-errors.ts);
   * not a request held back before sending, nor `already_gone` (the target is gone: for a
   * delete that is success).
   */
  private async authed<S extends z.ZodType>(
    ...args: [api: LarkRoute, method: string, path: string, body: unknown, schema: S, call: CallOptions]
  ): Promise<z.infer<S>> {
    const started = Date.now();
    try {
      const answer = await this.authedCall(...args);
      metric('lark_call_ms', since(started), 'ok', args[0]);
      return answer;
    } catch (err) {
      metric('lark_call_ms', since(started), callOutcome(err), args[0]);
      if (this.errors && err instanceof LarkApiError && !err.notSent && err.kind !== 'already_gone')
        await this.errors.failed(args[0], err);
      throw err;
    }
  }

  private async authedCall<S extends z.ZodType>(
    api: LarkRoute,
    method: string,
    path: string,
    body: unknown,
    schema: S,
    call: CallOptions,
  ): Promise<z.infer<S>> {
    const key = tokenCacheKey(this.base, this.creds.appId);
    for (let attempt = 1; ; attempt++) {
      await this.holdBack(api, `${method} ${route(path)}`);
      const token = await this.tenantToken(call);
      const res = await this.send(method, path, body, token, call);
      if (attempt === 1 && TOKEN_CODES.has(res.code)) {
        dropToken(key, token);
        continue;
      }
      return this.parseRecordingReset(api, res, schema);
    }
  }

  /**
   * `parse`, and on a 429 with a reset, the reset recorded before the caller hears of it, so
   * no other call of this route (in any isolate) is sent before it.
   */
  private async parseRecordingReset<S extends z.ZodType>(
    api: LarkRoute,
    res: RawAnswer,
    schema: S,
  ): Promise<z.infer<S>> {
    try {
      return this.parse(res, schema);
    } catch (err) {
      if (
        this.gate &&
        err instanceof LarkApiError &&
        (err.httpStatus === 429 || err.code === RATE_LIMITED_CODE) &&
        err.retryAfterSeconds
      )
        await this.gate.limited(api, err.retryAfterSeconds);
      throw err;
    }
  }

  /**
   * Before each API call: a route held by a recorded reset is not called (nothing is sent);
   * a call let through is counted in the app's calls of the day (rate-limits.ts `admit`).
   */
  private async holdBack(api: LarkRoute, what: string): Promise<void> {
    if (!this.gate) return;
    const ms = await this.gate.admit(api);
    if (ms <= 0) return;
    throw new LarkApiError(
      'retryable',
      RATE_LIMITED_CODE,
      0,
      `${what} held back: rate limited for ${ms} ms more`,
      Math.ceil(ms / 1000),
      true,
    );
  }

  private async send(
    method: string,
    path: string,
    body: unknown,
    token: string | undefined,
    call: CallOptions,
  ): Promise<RawAnswer> {
    const budget = call.deadline.slice(MAX_CALL_MS);
    if (budget <= 0)
      throw new LarkApiError(
        'retryable',
        0,
        0,
        `budget exhausted before ${method} ${route(path)}`,
        undefined,
        true,
      );
    const timeout = AbortSignal.timeout(budget);
    const signal = call.signal ? AbortSignal.any([call.signal, timeout]) : timeout;
    const headers: Record<string, string> = {};
    if (body !== undefined) headers['content-type'] = 'application/json; charset=utf-8';
    if (token) headers.authorization = `Bearer ${token}`;
    // Serialised outside the network try: a body that cannot serialise is our bug (a
    // TypeError), never a retryable Lark failure.
    const payload = body === undefined ? undefined : JSON.stringify(body);
    let response: Response;
    let text: string;
    try {
      response = await this.fetchFn(`${this.base}${path}`, { method, headers, body: payload, signal });
      text = await response.text();
    } catch (err) {
      // By design: only the network call is in here, and whatever fetch rejects with is a
      // network failure (the Fetch standard's TypeError, workerd's "Network connection lost"
      // Error, an abort or our timeout); each may succeed on a later try.
      const timedOut = timeout.aborted;
      const what = timedOut ? `timed out after ${budget} ms` : `failed: ${(err as Error).name}`;
      throw new LarkApiError('retryable', 0, 0, `${method} ${route(path)} ${what}`);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      // By design: a body that is not JSON (a gateway's error page) is judged in `parse`.
      json = undefined;
    }
    const envelope = ApiEnvelope.safeParse(json);
    return {
      status: response.status,
      headers: response.headers,
      json,
      code: envelope.success ? envelope.data.code : -1,
      msg: envelope.success ? (envelope.data.msg ?? '') : text.slice(0, 80),
      what: `${method} ${route(path)}`,
    };
  }

  private parse<S extends z.ZodType>(res: RawAnswer, schema: S): z.infer<S> {
    if (res.code === -1) {
      // Not Lark JSON: a gateway error page, or the plain-text `404 page not found`.
      const kind = res.status >= 500 || res.status === 429 ? 'retryable' : 'permanent';
      const plainNotFound = res.status === 404 && res.msg.trim() === PLAIN_NOT_FOUND;
      throw new LarkApiError(
        kind,
        0,
        res.status,
        `${res.what} answered HTTP ${res.status} without Lark JSON`,
        undefined,
        false,
        plainNotFound ? 'plain_not_found' : 'other',
      );
    }
    if (res.code !== 0 || res.status >= 400) {
      const kind = classify(res.status, res.code);
      const wait = kind === 'retryable' && (res.status === 429 || RETRYABLE_CODES.has(res.code));
      throw new LarkApiError(
        kind,
        res.code,
        res.status,
        `${res.what} failed with code ${res.code}: ${res.msg}`,
        wait ? retryAfter(res.headers) : undefined,
      );
    }
    const parsed = schema.safeParse(res.json);
    if (!parsed.success)
      throw new LarkApiError('permanent', 0, res.status, `${res.what} answered an unexpected shape`);
    return parsed.data;
  }
}

/** Lark's answer to an unknown path (reference §2): plain text, not its JSON envelope. */
const PLAIN_NOT_FOUND = '404 page not found';

interface RawAnswer {
  status: number;
  headers: Headers;
  json: unknown;
  code: number;
  msg: string;
  what: string;
}

function enc(segment: string): string {
  return encodeURIComponent(segment);
}

/** A failed call's outcome label (lark_call_ms): held back, or its kind and Lark/HTTP code. */
function callOutcome(err: unknown): string {
  if (!(err instanceof LarkApiError)) return 'error';
  if (err.notSent) return 'held';
  return `${err.kind}:${err.code || err.httpStatus}`;
}

/** The path without ids or query, for messages that may reach logs. */
function route(path: string): string {
  return path.replace(/\?.*$/, '').replace(/\/(om|cli|oc)_[^/]+/g, '/:id');
}
