import type { Clock } from '../clock';
import { registerSecret } from '../log';

/**
 * Tenant tokens cached per (API host, app) in isolate memory: a string, not an I/O object,
 * so it may outlive a request. Cached until `expire` minus a safety margin, as node-sdk does
 * (3 minutes), so a token is never sent in its last minutes of life.
 */
export const TOKEN_SAFETY_MARGIN_MS = 3 * 60_000;
const MAX_ENTRIES = 1000;

interface Entry {
  token: string;
  usableUntilMs: number;
}

const entries = new Map<string, Entry>();

export function tokenCacheKey(baseUrl: string, appId: string): string {
  return `${baseUrl}|${appId}`;
}

export function cachedToken(key: string, clock: Clock): string | undefined {
  const hit = entries.get(key);
  if (!hit) return undefined;
  if (clock.now() >= hit.usableUntilMs) {
    entries.delete(key);
    return undefined;
  }
  return hit.token;
}

export function storeToken(key: string, token: string, expireSeconds: number, clock: Clock): void {
  // A tenant token is a bearer credential for the whole app: never printed, cached or not.
  registerSecret(token);
  const usableUntilMs = clock.now() + expireSeconds * 1000 - TOKEN_SAFETY_MARGIN_MS;
  if (usableUntilMs <= clock.now()) return; // too close to expiry to be worth caching
  if (entries.size >= MAX_ENTRIES) entries.delete(entries.keys().next().value as string);
  entries.set(key, { token, usableUntilMs });
}

/** Drops the token only if it is still the one that failed (another call may have refreshed). */
export function dropToken(key: string, token: string): void {
  if (entries.get(key)?.token === token) entries.delete(key);
}
