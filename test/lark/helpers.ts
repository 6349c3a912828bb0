import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import { expect } from 'vitest';
import worker from '../../workers/index';
import { LarkApiError } from '../../workers/lark/errors';
import { cachedToken, dropToken, tokenCacheKey } from '../../workers/lark/token-cache';
import { uid } from '../helpers/db';
import { type CardKitConfig, type CardView, listCards, readCard, setCardKit } from '../helpers/lark-cards';

export const larkBase = () => env.LARK_API_BASE!;

/**
 * What a new isolate sees of one app: no cached tenant token (the cache is isolate memory).
 * Returns whether a token was cached, so a caller can insist that it was.
 */
export function forgetCachedToken(app: { apiBase: string; appId: string }): boolean {
  const key = tokenCacheKey(app.apiBase.replace(/\/+$/, ''), app.appId);
  const token = cachedToken(key, { now: () => 0 });
  if (token !== undefined) dropToken(key, token);
  return token !== undefined;
}

/** Calls the emulator's control API (/__emulator/...). */
export async function emu<T = unknown>(
  path: string,
  body?: unknown,
  method = body === undefined ? 'GET' : 'POST',
): Promise<T> {
  const res = await fetch(`${larkBase()}/__emulator/${path}`, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`emulator ${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

/** A CardKit card as the emulator holds it (test/helpers/lark-cards.ts). */
export const emuCard = (cardId: string): Promise<CardView> => readCard(larkBase(), cardId);

/** The cards sent as, or in answer to, a message (or all of an app's). */
export const emuCards = (filter: { app_id?: string; message_id?: string }): Promise<CardView[]> =>
  listCards(larkBase(), filter);

/** The emulator's choices where Lark's CardKit behaviour is unconfirmed. */
export const emuCardKit = (patch: Partial<CardKitConfig>): Promise<CardKitConfig> =>
  setCardKit(larkBase(), patch);

/**
 * Resolves once the emulator holds `count` calls of `route` (a `hold` fault): they have
 * arrived and wait unanswered. The emulator answers 408 after 10 s, which `emu` throws.
 */
export function untilHeld(route: string, count = 1): Promise<unknown> {
  return emu('faults/held', { route, count });
}

/** Lets every held call proceed (`DELETE faults` drops them instead). */
export function releaseHeld(): Promise<{ released: number }> {
  return emu('faults/release', {});
}

/**
 * The installations admin API. `logLevel` runs the request with that LOG_LEVEL binding (the
 * test config says `warn`), for tests that read the info lines a route writes.
 */
export async function admin(
  path: string,
  init: { method?: string; body?: unknown; token?: string; logLevel?: 'debug' | 'info' } = {},
): Promise<Response> {
  const url = `http://test/admin/lark/installations${path}`;
  const req: RequestInit = {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers: {
      authorization: `Bearer ${init.token ?? env.ADMIN_TOKEN!}`,
      'content-type': 'application/json',
    },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  };
  if (!init.logLevel) return exports.default.fetch(url, req);
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request(url, req), { ...env, LOG_LEVEL: init.logLevel }, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

/** The stable error code of a JSON error answer. */
export async function errorCode(res: Response): Promise<string | undefined> {
  return ((await res.clone().json()) as { error?: { code?: string } }).error?.code;
}

export interface TestApp {
  appId: string;
  appSecret: string;
  verificationToken: string;
  encryptKey: string | null;
  installationId: string;
  /** The app's bot as the emulator made it up (`GET /open-apis/bot/v3/info` → bot.open_id). */
  botOpenId: string;
}

/** A fresh app in the emulator and its installation in the service. */
export async function installApp(opts: { encrypt?: boolean } = {}): Promise<TestApp> {
  const appId = `cli_${uid('a').replace(/[^A-Za-z0-9]/g, '')}`;
  const app = {
    appId,
    appSecret: `secret-${crypto.randomUUID()}`,
    verificationToken: `vtok-${crypto.randomUUID()}`,
    encryptKey: opts.encrypt === false ? null : `ekey-${crypto.randomUUID()}`,
  };
  const registered = await emu<{ bot_open_id: string }>('apps', {
    app_id: app.appId,
    app_secret: app.appSecret,
    verification_token: app.verificationToken,
    ...(app.encryptKey ? { encrypt_key: app.encryptKey } : {}),
  });
  const res = await admin('', {
    body: {
      workspace_id: uid('ws'),
      app_id: app.appId,
      app_secret: app.appSecret,
      verification_token: app.verificationToken,
      encrypt_key: app.encryptKey,
    },
  });
  if (res.status !== 201) throw new Error(`register failed: ${res.status} ${await res.text()}`);
  const { installation } = (await res.json()) as { installation: { id: string } };
  return { ...app, installationId: installation.id, botOpenId: registered.bot_open_id };
}

export interface BuiltEvent {
  event_id?: string;
  message_id?: string;
  challenge?: string;
  request: { headers: Record<string, string>; body: string };
}

/** Asks the emulator for a delivery exactly as Lark would send it (returned, not posted). */
export function buildEvent(app: TestApp, spec: Record<string, unknown> = {}): Promise<BuiltEvent> {
  return emu<BuiltEvent>('events', { app_id: app.appId, deliver: 'return', ...spec });
}

export function submit(installationId: string, request: { headers: Record<string, string>; body: string }) {
  return exports.default.fetch(`http://test/lark/events/${installationId}`, {
    method: 'POST',
    headers: request.headers,
    body: request.body,
  });
}

/** The LarkApiError a call rejects with (fails the test when it resolves or throws anything else). */
export async function larkFailure(p: Promise<unknown>): Promise<LarkApiError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(LarkApiError);
  return err as LarkApiError;
}
