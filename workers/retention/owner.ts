import type { Env } from '../env';

/**
 * The retention cleanup Worker (retention.wrangler.toml) through the RETENTION service
 * binding: its RPC methods hand over to its one RetentionCleanup object.
 */
export function retentionOwner(env: Env) {
  return env.RETENTION;
}
