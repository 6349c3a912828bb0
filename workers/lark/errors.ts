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
/** 99991400 "request trigger frequency limit" (HTTP 429, reference §2 "Generic codes"). */
export const RATE_LIMITED_CODE = 99991400;
/** 231015 "repeated request processing": an identical request is being processed elsewhere. */
export const IN_FLIGHT_ELSEWHERE_CODE = 231015;
/** Rate limited, or in flight elsewhere. */
export const RETRYABLE_CODES = new Set([RATE_LIMITED_CODE, IN_FLIGHT_ELSEWHERE_CODE]);
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
    /**
     * The request never left this process: held back by a recorded rate-limit reset
     * (lark/rate-limits.ts), or the budget was gone before it could be sent.
     */
    readonly notSent = false,
    /**
     * What answered: Lark's JSON envelope (`json`, the default), the plain-text
     * `404 page not found` Lark gives for an unknown path (`plain_not_found`), or anything else
     * that is not Lark JSON (`other`: a gateway's page, an HTML error, an empty body).
     */
    readonly answer: 'json' | 'plain_not_found' | 'other' = 'json',
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

/**
 * Does this failure PROVE that Lark applied nothing? Decided here and nowhere else; a create
 * that is proven refused can be forgotten at once (the typing ledger frees its quota slot),
 * anything else must be treated as possibly applied. Per shared/reference/lark-open-api.md:
 * - not sent at all (`notSent`);
 * - 99991400 "request trigger frequency limit" (§2 "Generic codes": frequency control
 *   refuses the request; some older APIs send it with HTTP 400), in Lark's JSON;
 * - a token refusal (99991661/99991663): it reaches a caller only after the client's one
 *   refresh (§1 "drop the token, fetch a new one and retry once"), and an unauthenticated
 *   call is refused before the API runs;
 * - any other refusal with HTTP 4xx IN LARK'S JSON (a non-zero code): every reaction error is
 *   HTTP 400 (§2 "Error codes"); and the plain-text `404 page not found` of an unknown path;
 * - a Lark error code with HTTP 2xx (§1: a bad app_id answers HTTP 200 with code 10003).
 * Never proof: no answer (network failure, timeout, lost response: HTTP status 0), a 5xx (the
 * failure may come after the write), 231015 "repeated request processing" (an identical
 * request is still being processed and may yet apply), a 2xx with code 0 whose body we
 * could not read (a success we could not parse), and a 4xx that is not Lark's own answer (a
 * gateway's 408/499, an HTML 4xx, a 429 without Lark JSON): a proxy may answer after it
 * forwarded the request, so Lark may have applied it (issue 28 hole 4).
 */
export function provesNothingApplied(err: LarkApiError): boolean {
  if (err.notSent) return true;
  if (err.code === IN_FLIGHT_ELSEWHERE_CODE) return false;
  if (err.answer === 'plain_not_found') return err.httpStatus === 404;
  // From here on only Lark's own JSON refusals: a code, in Lark's envelope.
  if (err.answer !== 'json' || err.code === 0) return false;
  if (err.code === RATE_LIMITED_CODE) return true;
  if (err.httpStatus >= 400 && err.httpStatus < 500) return true;
  return err.httpStatus >= 200 && err.httpStatus < 300;
}
