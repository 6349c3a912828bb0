import { AppError } from './errors';
import { log } from './log';

/**
 * Request-rate guards where nothing else bounds cost (docs/operations.md "Rate limits"): the
 * Lark webhook per installation (its verified deliveries and the refused ones on separate
 * keys), the authenticated /v1 routes per actor, console sign-in attempts per client
 * address. The Workers rate-limiting binding counts a fixed window per key; it has no reset
 * time to read, so Retry-After is the whole period, which is never too early.
 */
export type RateLimitScope = 'installation' | 'unverified' | 'actor' | 'console_sign_in';

const REFUSAL: Record<RateLimitScope, string> = {
  installation: 'Too many webhook requests for this installation; retry later',
  unverified: 'Too many refused webhook requests for this installation; retry later',
  actor: 'Too many requests for this actor; retry later',
  console_sign_in: 'Too many sign-in attempts from this address; retry later',
};

/** The `period` of every [[ratelimits]] binding in wrangler.toml. */
export const RATE_LIMIT_PERIOD_S = 60;

let unavailableLogged = false;

export async function enforceRateLimit(
  limiter: RateLimit | undefined,
  scope: RateLimitScope,
  key: string,
): Promise<void> {
  let success: boolean;
  try {
    if (!limiter) throw new Error('rate-limit binding missing');
    ({ success } = await limiter.limit({ key: `${scope}:${key}` }));
  } catch (err) {
    // By design the guard fails open: it bounds cost, it is not an authorization check, and a
    // limiter outage must not take the webhook or the API down with it. Logged once per isolate.
    if (!unavailableLogged) {
      unavailableLogged = true;
      log.warn('rate_limit_unavailable', { scope, error: err });
    }
    return;
  }
  if (success) return;
  throw new AppError(
    'rate_limited',
    REFUSAL[scope],
    { scope, retryAfterSeconds: RATE_LIMIT_PERIOD_S },
    { 'retry-after': String(RATE_LIMIT_PERIOD_S) },
  );
}
