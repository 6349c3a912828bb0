/**
 * The smoke tests `npm run deploy` sends to a version before it takes traffic (and after each
 * step): the requests and the verdicts on their answers, without I/O (scripts/lib/deploy-runner.ts
 * sends them with a timeout each).
 *
 *  - GET /healthz: 200 with `status: ok` (the database reachable from the Worker, through the
 *    pooled DATABASE_URL secret), and `x-worker-version` equal to the version under test. The
 *    platform applies `Cloudflare-Workers-Version-Overrides` only once the version is in the
 *    deployment, "up to a couple of seconds" after the change, and otherwise routes the request
 *    by the percentages without saying so
 *    (https://developers.cloudflare.com/workers/versions-and-deployments/version-overrides/):
 *    an answer from another version is retried, never taken for a pass.
 *  - POST /lark/events/<installation>: a url_verification encrypted with the installation's
 *    Encrypt Key and signed (X-Lark-Signature over the raw body), answered 200 with the same
 *    challenge. Lark itself does not sign its URL check, but the webhook verifies a signature
 *    whenever one is sent (workers/lark/verify.ts), so this one request runs the whole delivery
 *    path: the installation row, SECRET_KEYS opening its sealed keys, the signature, the
 *    decryption and the token. It writes nothing.
 */
import { randomBytes } from 'node:crypto';
import { larkEncrypt, larkSign } from '../../emulator/events';

export const VERSION_OVERRIDE_HEADER = 'Cloudflare-Workers-Version-Overrides';
export const VERSION_HEADER = 'x-worker-version';

export interface SmokeRequest {
  name: string;
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
}

export type Verdict = { ok: true } | { ok: false; retry: boolean; reason: string };

/** The override: a Structured Fields dictionary, the Worker's name → the version id as a string. */
export function overrideHeader(worker: string, version: string): Record<string, string> {
  if (!/^[a-z0-9-]+$/.test(worker) || !/^[0-9a-f-]{8,64}$/i.test(version))
    throw new Error(`not a worker name and version id: ${worker}, ${version}`);
  return { [VERSION_OVERRIDE_HEADER]: `${worker}="${version}"` };
}

export function healthzRequest(origin: string, override: Record<string, string>): SmokeRequest {
  return {
    name: 'GET /healthz',
    url: new URL('/healthz', origin).href,
    method: 'GET',
    headers: { ...override },
  };
}

export function judgeHealthz(
  status: number,
  headers: { get(name: string): string | null },
  body: string,
  expectedVersion: string | null,
): Verdict {
  const answered = headers.get(VERSION_HEADER);
  // Another version answered: the override (or the deployment) has not reached this location yet.
  if (expectedVersion !== null && answered !== expectedVersion)
    return {
      ok: false,
      retry: true,
      reason: `answered by version ${answered ?? '(no x-worker-version)'}, not ${expectedVersion}`,
    };
  if (status !== 200) return { ok: false, retry: false, reason: `status ${status}: ${body.slice(0, 200)}` };
  let parsed: { status?: unknown };
  try {
    parsed = JSON.parse(body);
  } catch {
    return { ok: false, retry: false, reason: `not JSON: ${body.slice(0, 200)}` };
  }
  return parsed.status === 'ok'
    ? { ok: true }
    : { ok: false, retry: false, reason: `body ${body.slice(0, 200)}` };
}

export interface LarkSmoke {
  installationId: string;
  verificationToken: string;
  /** Null: the app has no Encrypt Key, so Lark's check is plain JSON and nothing is signed. */
  encryptKey: string | null;
}

/** A url_verification as the webhook verifies it, with a fresh challenge (returned to judge by). */
export function larkChallengeRequest(
  origin: string,
  lark: LarkSmoke,
  override: Record<string, string>,
  nowMs: number,
  challenge = randomBytes(16).toString('hex'),
): { request: SmokeRequest; challenge: string } {
  const payload = JSON.stringify({ challenge, token: lark.verificationToken, type: 'url_verification' });
  const headers: Record<string, string> = { ...override, 'content-type': 'application/json; charset=utf-8' };
  let body = payload;
  if (lark.encryptKey) {
    body = JSON.stringify({ encrypt: larkEncrypt(payload, lark.encryptKey) });
    const timestamp = String(Math.floor(nowMs / 1000));
    const nonce = randomBytes(8).toString('hex');
    headers['x-lark-request-timestamp'] = timestamp;
    headers['x-lark-request-nonce'] = nonce;
    headers['x-lark-signature'] = larkSign(timestamp, nonce, lark.encryptKey, body);
  }
  const url = new URL(`/lark/events/${encodeURIComponent(lark.installationId)}`, origin).href;
  return { request: { name: 'signed Lark challenge', url, method: 'POST', headers, body }, challenge };
}

export function judgeChallenge(status: number, body: string, challenge: string): Verdict {
  // 429: the installation's webhook budget is spent (a Lark burst); the next try may pass.
  if (status === 429) return { ok: false, retry: true, reason: 'status 429 (webhook rate limit)' };
  if (status !== 200) return { ok: false, retry: false, reason: `status ${status}: ${body.slice(0, 200)}` };
  try {
    const parsed = JSON.parse(body) as { challenge?: unknown };
    if (parsed.challenge === challenge) return { ok: true };
  } catch {
    // Not JSON: judged below with the body.
  }
  return { ok: false, retry: false, reason: `challenge not echoed: ${body.slice(0, 200)}` };
}
