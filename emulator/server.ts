/**
 * The Lark emulator: a Node HTTP server implementing the Open API routes the service uses
 * (tokens, reactions, replies, the bot's info, CardKit cards), plus /__emulator for inspection, faults, the
 * clock and event delivery.
 *
 *   const emu = await startLarkEmulator({ port: 0 });
 *   emu.url  // http://127.0.0.1:<port>; point LARK_API_BASE here
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type ApiAnswer, larkError, tooMany } from './answers';
import { cardIdOf } from './cardkit-api';
import { type CallLogEntry, control } from './control';
import { FaultBook, type RouteName } from './faults';
import { apiRoute, tokenRoute } from './open-api';
import { type EmulatorClock, EmulatorState } from './state';

export interface EmulatorOptions {
  port?: number;
  host?: string;
  clock?: EmulatorClock;
  /** Lark's per-API limits (50/s, 1000/min per app); on by default. */
  rateLimits?: boolean;
}

export interface LarkEmulator {
  url: string;
  state: EmulatorState;
  faults: FaultBook;
  calls: CallLogEntry[];
  close(): Promise<void>;
}

const API_ROUTES: { method: string; pattern: RegExp; route: RouteName; keys: string[] }[] = [
  {
    method: 'POST',
    pattern: /^\/open-apis\/auth\/v3\/tenant_access_token\/internal\/?$/,
    route: 'token',
    keys: [],
  },
  {
    method: 'POST',
    pattern: /^\/open-apis\/im\/v1\/messages\/([^/]+)\/reactions$/,
    route: 'reactions.create',
    keys: ['message_id'],
  },
  {
    method: 'GET',
    pattern: /^\/open-apis\/im\/v1\/messages\/([^/]+)\/reactions$/,
    route: 'reactions.list',
    keys: ['message_id'],
  },
  {
    method: 'DELETE',
    pattern: /^\/open-apis\/im\/v1\/messages\/([^/]+)\/reactions\/([^/]+)$/,
    route: 'reactions.delete',
    keys: ['message_id', 'reaction_id'],
  },
  {
    method: 'POST',
    pattern: /^\/open-apis\/im\/v1\/messages\/([^/]+)\/reply$/,
    route: 'reply',
    keys: ['message_id'],
  },
  {
    method: 'DELETE',
    pattern: /^\/open-apis\/im\/v1\/messages\/([^/]+)$/,
    route: 'messages.delete',
    keys: ['message_id'],
  },
  { method: 'GET', pattern: /^\/open-apis\/bot\/v3\/info\/?$/, route: 'bot.info', keys: [] },
  { method: 'POST', pattern: /^\/open-apis\/cardkit\/v1\/cards$/, route: 'cardkit.create', keys: [] },
  {
    method: 'PUT',
    pattern: /^\/open-apis\/cardkit\/v1\/cards\/([^/]+)\/elements\/([^/]+)\/content$/,
    route: 'cardkit.content',
    keys: ['card_id', 'element_id'],
  },
  {
    method: 'PATCH',
    pattern: /^\/open-apis\/cardkit\/v1\/cards\/([^/]+)\/settings$/,
    route: 'cardkit.settings',
    keys: ['card_id'],
  },
  {
    method: 'PUT',
    pattern: /^\/open-apis\/cardkit\/v1\/cards\/([^/]+)$/,
    route: 'cardkit.update',
    keys: ['card_id'],
  },
  {
    method: 'POST',
    pattern: /^\/open-apis\/cardkit\/v1\/cards\/([^/]+)\/batch_update$/,
    route: 'cardkit.batch_update',
    keys: ['card_id'],
  },
];

export async function startLarkEmulator(opts: EmulatorOptions = {}): Promise<LarkEmulator> {
  const clock = opts.clock ?? { now: () => Date.now() };
  let state = new EmulatorState(clock);
  let faults = new FaultBook();
  const calls: CallLogEntry[] = [];
  const rateLimits = { enabled: opts.rateLimits ?? true };
  const windows = new Map<string, { second: number; sCount: number; minute: number; mCount: number }>();

  /**
   * Back to a new emulator on the same port (POST /__emulator/reset): apps, tokens, messages,
   * cards and the CardKit switches, faults, the call log, the clock and the rate windows. The workerd tests share one runtime,
   * and so one LARK_API_BASE, across the files a worker runs (vitest.config.ts); each file
   * still starts on an emulator of its own. A held call of the previous file is let go first.
   */
  function reset(): void {
    faults.release();
    state = new EmulatorState(clock);
    faults = new FaultBook();
    calls.length = 0;
    windows.clear();
    rateLimits.enabled = opts.rateLimits ?? true;
  }

  function rateLimited(route: RouteName, appId: string): number | undefined {
    if (!rateLimits.enabled) return undefined;
    const now = state.now();
    // Whether Lark's CardKit limit is one budget for its routes or one per route is unclear
    // (reference §6): `appLimitScope` chooses, one budget by default (the stricter reading).
    const shared = state.cards.config.appLimitScope === 'cardkit' && route.startsWith('cardkit.');
    const key = `${shared ? 'cardkit' : route}|${appId}`;
    const w = windows.get(key) ?? { second: 0, sCount: 0, minute: 0, mCount: 0 };
    const sec = Math.floor(now / 1000);
    const min = Math.floor(now / 60_000);
    if (w.second !== sec) Object.assign(w, { second: sec, sCount: 0 });
    if (w.minute !== min) Object.assign(w, { minute: min, mCount: 0 });
    windows.set(key, w);
    if (w.mCount >= 1000) return Math.ceil(((min + 1) * 60_000 - now) / 1000);
    if (w.sCount >= 50) return 1;
    w.sCount++;
    w.mCount++;
    return undefined;
  }

  async function handleApi(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    body: unknown,
  ): Promise<void> {
    const match = API_ROUTES.find((r) => r.method === req.method && r.pattern.test(url.pathname));
    if (!match) return plain404(res);
    const params: Record<string, string> = {};
    const m = match.pattern.exec(url.pathname)!;
    match.keys.forEach((k, i) => {
      params[k] = decodeURIComponent(m[i + 1]!);
    });
    const latency = faults.takeLatency(match.route);
    if (latency > 0) await new Promise((r) => setTimeout(r, latency));
    const held = faults.takeHold(match.route);
    if (held && !(await held)) {
      res.socket?.destroy();
      return;
    }
    let appId: string | undefined;
    let token: string | undefined;
    /** The card a call was about: in the path, a reply's content, or a create's answer. */
    const cardOf = (a: ApiAnswer): { cardId?: string } => {
      const b = body as { msg_type?: unknown; content?: unknown } | undefined;
      const created = (a.body as { data?: { card_id?: unknown } } | undefined)?.data?.card_id;
      const cardId =
        params.card_id ??
        (match.route === 'reply' ? cardIdOf(b?.msg_type, b?.content) : undefined) ??
        (typeof created === 'string' ? created : undefined);
      return cardId ? { cardId } : {};
    };
    /** A reaction create's emoji (the call log tells a Typing badge from a failure notice). */
    const emoji =
      match.route === 'reactions.create'
        ? (body as { reaction_type?: { emoji_type?: unknown } } | undefined)?.reaction_type?.emoji_type
        : undefined;
    const emojiOf = typeof emoji === 'string' ? { emojiType: emoji } : {};
    const requestedAppId =
      match.route === 'token' ? String((body as { app_id?: unknown } | undefined)?.app_id ?? '') : undefined;
    const finish = (a: ApiAnswer) => {
      calls.push({
        route: match.route,
        appId,
        ...(requestedAppId !== undefined ? { requestedAppId } : {}),
        messageId: params.message_id,
        ...emojiOf,
        ...cardOf(a),
        status: a.status,
        at: state.now(),
      });
      send(res, a);
    };
    if (match.route !== 'token') {
      const auth = req.headers.authorization ?? '';
      if (!/^Bearer\s+\S+/.test(auth))
        return finish(
          larkError(
            400,
            99991661,
            'Missing access token for authorization. Please make a request with token attached.',
          ),
        );
      token = auth.replace(/^Bearer\s+/, '');
      appId = state.tokenApp(token);
      if (!appId)
        return finish(
          larkError(
            400,
            99991663,
            'Invalid access token for authorization. Please make a request with token attached.',
          ),
        );
    }
    const fault = faults.takeOutcome(match.route);
    if (fault?.kind === '5xx') return finish({ status: fault.status ?? 500, body: 'upstream error' });
    if (fault?.kind === '429') return finish(tooMany(fault.resetSeconds ?? 1));
    if (fault?.kind === 'expired_token' && token) {
      state.revokeToken(token);
      return finish(
        larkError(
          400,
          99991663,
          'Invalid access token for authorization. Please make a request with token attached.',
        ),
      );
    }
    if (appId) {
      const reset = rateLimited(match.route, appId);
      if (reset !== undefined) return finish(tooMany(reset));
    }
    const answer =
      match.route === 'token'
        ? tokenRoute(state, body)
        : apiRoute(state, { route: match.route, appId, params, query: url.searchParams, body });
    if (fault?.kind === 'lost_response') {
      calls.push({
        route: match.route,
        appId,
        requestedAppId,
        messageId: params.message_id,
        ...emojiOf,
        ...cardOf(answer),
        status: 'dropped',
        at: state.now(),
      });
      res.socket?.destroy();
      return;
    }
    finish(answer);
  }

  const server = createServer(async (req, res) => {
    try {
      const url = new URL(req.url ?? '/', 'http://emulator');
      const raw = await readBody(req);
      let body: unknown;
      try {
        body = raw.length ? JSON.parse(raw) : undefined;
      } catch {
        body = undefined;
      }
      if (url.pathname.startsWith('/__emulator/')) {
        const parts = url.pathname
          .slice('/__emulator/'.length)
          .split('/')
          .filter(Boolean)
          .map(decodeURIComponent);
        return send(
          res,
          await control(
            { state, faults, calls, rateLimits, reset },
            req.method ?? 'GET',
            parts,
            url.searchParams,
            body,
          ),
        );
      }
      await handleApi(req, res, url, body);
    } catch (err) {
      send(res, { status: 500, body: { error: (err as Error).message } });
    }
  });
  await new Promise<void>((resolve, reject) => {
    // Without this a taken port is an unhandled 'error' event: a crash with a stack.
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${opts.host ?? '127.0.0.1'}:${port}`,
    // Getters: a reset replaces the state and the fault book.
    get state() {
      return state;
    },
    get faults() {
      return faults;
    },
    calls,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function plain404(res: ServerResponse): void {
  res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
  res.end('404 page not found');
}

function send(res: ServerResponse, a: ApiAnswer): void {
  const text = typeof a.body === 'string' ? a.body : JSON.stringify(a.body);
  const type = typeof a.body === 'string' ? 'text/plain; charset=utf-8' : 'application/json; charset=utf-8';
  res.writeHead(a.status, { 'content-type': type, ...(a.headers ?? {}) });
  res.end(text);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
