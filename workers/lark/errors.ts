/**
 * How a failed Lark call should be handled, decided once here so callers switch on `kind`:
 * - `already_gone`: the target no longer exists (message recalled or deleted, reaction
 *   already removed); a delete is done, a create can never succeed.
 * - `retryable`: try again later; `retryAfterSeconds` from `x-ogw-ratelimit-reset` on 429.
 * - `permanent`: retrying the same request cannot help (bad emoji, no permission, bad app).
 */
export type LarkErrorKind = 'already_gone' | 'retryable' | 'permanent';

/** 230011 message withdrawn (reply); 230110 message deleted; 231003 message not found or recalled; 231004 chat gone;
 *  231005 thread removed; 231010/231011 reaction not on this message / not found
 *  (the likely "already deleted" answers, see reference §2); 232009 chat dissolved. */
export const ALREADY_GONE_CODES = new Set([230011, 230110, 231003, 231004, 231005, 231010, 231011, 232009]);
/** 99991400 rate limited; 231015 "repeated request processing" (in flight elsewhere). */
export const RETRYABLE_CODES = new Set([99991400, 231015]);
/**
 * The token endpoint refused the app's credentials: 10014 app unauthorized/disabled, 10015
 * wrong App Secret (reference §1; the HTTP status is UNCONFIRMED, so callers read the code).
 * Classified `permanent`: the same secret never works again. After a rotation a caller with
 * another copy of the credentials (the typing ledger's installation) may still succeed.
 */
export const CREDENTIAL_CODES = new Set([10014, 10015]);
/** Token invalid or missing: refreshed and retried once by the client. */
export const TOKEN_CODES = new Set([99991661, 99991663]);

export class LarkApiError extends Error {
  constructor(
    readonly kind: LarkErrorKind,
    /** Lark's business code; 0 when the failure had none (network, timeout, 5xx, bad JSON). */
    readonly code: number,
    readonly httpStatus: number,
    message: string,
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = 'LarkApiError';
  }
}

export function classify(httpStatus: number, code: number): LarkErrorKind {
  if (ALREADY_GONE_CODES.has(code)) return 'already_gone';
  if (RETRYABLE_CODES.has(code) || httpStatus === 429 || httpStatus >= 500) return 'retryable';
  // An expired token after our one refresh is still a token problem: the next try refreshes.
  if (TOKEN_CODES.has(code)) return 'retryable';
  return 'permanent';
}

export function retryAfter(headers: Headers): number | undefined {
  const raw = headers.get('x-ogw-ratelimit-reset');
  if (raw === null) return undefined;
  const n = Number(raw);
  return Number.isFinite(n) && n >= 0 ? n : undefined;
}
