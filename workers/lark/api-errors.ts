import type { Pool, PoolClient } from '@neondatabase/serverless';
import { log } from '../log';
import type { LarkApiError } from './errors';
import type { LarkRoute } from './rate-limits';

/** What a LarkClient tells after a failed Open API call (client.ts). Never throws. */
export interface ApiErrorLog {
  failed(route: LarkRoute, err: LarkApiError): Promise<void>;
}

type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

/** One statement: the app's row now holds this failure (the console's "last Open API error"). */
const RECORD = `
insert into lark_api_errors (api_base, app_id, route, code, http_status, at)
values ($1, $2, $3, $4, $5, app_now())
on conflict (api_base, app_id) do update
set route = excluded.route, code = excluded.code, http_status = excluded.http_status, at = excluded.at`;

/**
 * The last failed call per (API host, App ID) in `lark_api_errors` (migration 0090), keyed like
 * the rate-limit gate; one installation per app, so the console joins it to its installation.
 * An autocommit statement on `q` (a pool, never a transaction held across the remote call).
 * A failed record is logged once: the caller still gets Lark's answer.
 */
export function durableErrorLog(q: Q, app: { apiBase: string; appId: string }): ApiErrorLog {
  const base = app.apiBase.replace(/\/+$/, '');
  return {
    async failed(route, err) {
      await q
        .query(RECORD, [base, app.appId, route, err.code, err.httpStatus])
        .catch((error: unknown) => log.warn('lark_api_error_record_failed', { route, error }));
    },
  };
}
