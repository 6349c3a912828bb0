import { z } from 'zod';

/**
 * Text Postgres can store. A JS string may hold two things a `text` or `jsonb` value cannot:
 * U+0000 (refused: 22021 in text, 22P05 in jsonb) and a lone UTF-16 surrogate (the driver's
 * UTF-8 encoder silently turns it into U+FFFD in text, and a jsonb `\ud800` escape is refused
 * with 22P02). JSON can carry both as escapes, so every string from outside is checked here,
 * at the boundary, before it can reach a statement.
 */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export function isPgStorable(s: string): boolean {
  return !s.includes('\u0000') && !LONE_SURROGATE.test(s);
}

export const PG_TEXT_MESSAGE = 'text Postgres cannot store (U+0000 or a lone surrogate)';

/** A string Postgres can store; chain `.min`/`.max`/`.regex` as on any z.string(). */
export const pgText = () => z.string().refine(isPgStorable, PG_TEXT_MESSAGE);

/**
 * At most `max` UTF-16 units, never cutting a surrogate pair in half (a plain `slice` can, and
 * the half left over is a lone surrogate Postgres refuses in jsonb).
 */
export function truncateText(s: string, max: number): string {
  if (s.length <= max) return s;
  const end = /[\ud800-\udbff]/.test(s[max - 1] ?? '') ? max - 1 : max;
  return s.slice(0, end);
}

/**
 * The path of the first string in a parsed body (any depth, object keys included) that
 * Postgres cannot store, or null. The one check every JSON body and form passes before its
 * route's schema (issue 29 hole 12: a field whose own schema forgot `pgText`, `api_base`
 * through `z.url()`, reached SQL: 22021, a 500; a lone surrogate was stored as U+FFFD).
 */
export function unstorablePath(value: unknown, path: (string | number)[] = []): (string | number)[] | null {
  if (typeof value === 'string') return isPgStorable(value) ? null : path;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const at = unstorablePath(value[i], [...path, i]);
      if (at) return at;
    }
    return null;
  }
  if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      // A bad key is named by its position, never by its text (it may be a secret).
      if (!isPgStorable(k)) return [...path, '(key)'];
      const at = unstorablePath(v, [...path, k]);
      if (at) return at;
    }
  }
  return null;
}
