/**
 * The credential of `Authorization: Bearer <token>` (scheme case-insensitive, RFC 7235), or
 * null for any other form: no header, another scheme, the bare token, trailing words.
 */
export function bearerToken(header: string | undefined): string | null {
  return /^Bearer\s+(\S+)$/i.exec(header ?? '')?.[1] ?? null;
}

/**
 * The admin credentials' one accepted form: exactly `Bearer <token>`, the scheme as written
 * and one space (issue 29 hole 13; README "Admin API"). Strict because these are the
 * operator's keys: nothing gains from a lenient parse, and a lenient one accepted the bare
 * token on the retention routes. Actor tokens keep RFC 7235's case-insensitive scheme.
 */
export function adminBearerToken(header: string | undefined): string | null {
  return /^Bearer ([^\s]+)$/.exec(header ?? '')?.[1] ?? null;
}
