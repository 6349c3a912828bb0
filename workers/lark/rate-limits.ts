import type { Pool, PoolClient } from '@neondatabase/serverless';
import { log } from '../log';
import { CALL_DAY } from './call-counts';

/**
 * Lark's rate-limit resets, recorded durably so every isolate honours them (memory is not
 * shared between Worker isolates or requests). Lark limits each API per app (reference §2:
 * "1000/min and 50/s, per API per app per tenant"; a self-built app has one tenant), and
 * a 429 says how long to wait in `x-ogw-ratelimit-reset`. So a reset is kept per
 * (API host, App ID, route): a 429 on deleting reactions holds back deletes of that app
 * only, never its creates or listings, nor another app's calls.
 *
 * The same gate counts the app's calls per day (`admit`): every call a client sends passes
 * it, so the count is what an installation's `quiet` typing badge compares with its daily
 * budget (installations/settings.ts, channel/accept.ts).
 */
export type LarkRoute =
  | 'reactions.create'
  | 'reactions.delete'
  | 'reactions.list'
  | 'reply'
  // A reply the service posted, deleted again (recall_reply, channel/reply-deletion.ts).
  | 'messages.delete'
  // CardKit (reference §6): creating a card entity, and every update of one (element content,
  // full update), which Lark limits per app at 50/s.
  | 'cardkit.create'
  | 'cardkit.update'
  // The tenant token endpoint: rate-limited per app like any other API, and called by every
  // isolate whose cache is cold, so its resets are held like the others' (client.ts).
  | 'auth.tenant_access_token'
  // The bot's own identity (reference §6 "Mentions"): fetched once per installation
  // (channel/mentions.ts).
  | 'bot.info';

/** A reset longer than this is Lark misbehaving (its windows are a second and a minute). */
export const MAX_RESET_SECONDS = 3600;

/** What a LarkClient asks before and tells after each call of a route (client.ts). */
export interface RateGate {
  /** Milliseconds until the route may be called again; 0 when it may be called now. A read only. */
  heldForMs(route: LarkRoute): Promise<number>;
  /**
   * Before a call is sent: `heldForMs`, and when it is 0 the call is counted in the app's
   * calls of the day (lark_call_counts) by the same statement. Only the client calls it.
   */
  admit(route: LarkRoute): Promise<number>;
  /** Lark answered 429 with a reset: hold the route that long. Never throws. */
  limited(route: LarkRoute, resetSeconds: number): Promise<void>;
}

type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

/**
 * One primary-key read: the time left until the route's recorded reset, from app_now()
 * (database time, the same clock for every isolate).
 */
const HELD_FOR = `
select ceil(extract(epoch from not_before - app_now()) * 1000)::float8 as ms
from lark_rate_limits
where api_base = $1 and app_id = $2 and route = $3 and not_before > app_now()`;

/**
 * HELD_FOR, and when nothing holds the route, one more call in the app's count of the UTC day
 * (migrations/0030_baseline_lark.sql), in the same round trip: counting costs no extra statement per call, and
 * a call held back is not counted. The counter row is locked only for this autocommit
 * statement (every gate runs on a pool, never inside a transaction held across the call).
 */
const ADMIT = `
with held as (${HELD_FOR}),
counted as (
  insert into lark_call_counts as c (api_base, app_id, day, calls)
  select $1, $2, ${CALL_DAY}, 1
  where not exists (select 1 from held)
  on conflict (api_base, app_id, day) do update set calls = c.calls + 1
)
select ms from held`;

/** One statement; a later reset wins, an earlier one never shortens a recorded hold. */
const RECORD = `
insert into lark_rate_limits (api_base, app_id, route, not_before, updated_at)
values ($1, $2, $3, app_now() + $4 * interval '1 second', app_now())
on conflict (api_base, app_id, route) do update
set not_before = greatest(lark_rate_limits.not_before, excluded.not_before), updated_at = excluded.updated_at`;

/**
 * The gate of one app, backed by `lark_rate_limits` (migrations/0030_baseline_lark.sql). Neither statement
 * takes a lock that outlives it, so nothing is held across the remote call. A failed read
 * throws (the caller does not send: a failure of ours, not Lark's); a failed record is
 * logged and the caller still gets Lark's answer with its reset.
 */
export function durableRateGate(q: Q, app: { apiBase: string; appId: string }): RateGate {
  const base = app.apiBase.replace(/\/+$/, '');
  return {
    async heldForMs(route) {
      const { rows } = await q.query<{ ms: number }>(HELD_FOR, [base, app.appId, route]);
      return rows[0] ? Math.max(1, Number(rows[0].ms)) : 0;
    },
    async admit(route) {
      const { rows } = await q.query<{ ms: number }>(ADMIT, [base, app.appId, route]);
      return rows[0] ? Math.max(1, Number(rows[0].ms)) : 0;
    },
    async limited(route, resetSeconds) {
      const seconds = Math.min(MAX_RESET_SECONDS, resetSeconds);
      if (!(seconds > 0)) return;
      await q.query(RECORD, [base, app.appId, route, seconds]).catch((err: unknown) =>
        // Not thrown: the caller still schedules by the reset Lark gave it; only other
        // isolates may call this route once more before the reset and be refused again.
        log.warn('lark_rate_limit_record_failed', { appId: app.appId, route, error: err }),
      );
    },
  };
}
