import type { Pool } from '@neondatabase/serverless';
import type { Clock } from './clock';
import type { Config, Env } from './env';

/** Hono's environment for every route: bindings plus per-request services from `init`. */
export interface AppEnv {
  Bindings: Env;
  Variables: {
    requestId: string;
    config: Config;
    clock: Clock;
    /** The request's own pool, opened on first use and ended when the response is done. */
    db: () => Pool;
    /** The stable error code of an error answer (renderError), for the answer's metric. */
    errorCode?: string;
  };
}
