/**
 * The credential of `Authorization: Bearer <token>` (scheme case-insensitive, RFC 7235), or
 * null for any other form: no header, another scheme, the bare token, trailing words.
 */
export function bearerToken(header: string | undefined): string | null {
  return /^Bearer\s+(\S+)$/i.exec(header ?? '')?.[1] ?? null;
}
