import { durableErrorLog } from '../lark/api-errors';
import { LarkClient, type LarkCredentials } from '../lark/client';
import { durableRateGate } from '../lark/rate-limits';
import type { Q } from './types';

/**
 * Every Lark client the ledger uses (Add, delete, list) is built here, so none can skip the
 * durable rate-limit gate: no call goes to a route Lark answered 429 for before its
 * `x-ogw-ratelimit-reset` has passed, whichever isolate got the 429 (lark/rate-limits.ts).
 * A gated call is a `notSent` 99991400 failure: an Add counts as refused, a withdrawal as
 * retryable at the reset. Every failed call is recorded per app for the console (lark/api-errors.ts).
 */
export function ledgerClient(q: Q, creds: LarkCredentials, fetchFn?: typeof fetch): LarkClient {
  return new LarkClient(creds, {
    fetch: fetchFn,
    rateGate: durableRateGate(q, { apiBase: creds.baseUrl, appId: creds.appId }),
    errorLog: durableErrorLog(q, { apiBase: creds.baseUrl, appId: creds.appId }),
  });
}
