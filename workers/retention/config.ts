import type { z } from 'zod';
import { ConfigSchema, registerDatabaseSecret } from '../env';
import { AppError } from '../errors';
import { log, setLogLevel } from '../log';
import { bindMetrics } from '../metrics';

/**
 * The retention cleanup Worker's bindings (retention.wrangler.toml, secrets in
 * retention.dev.vars.example), generated into retention-worker-configuration.d.ts by
 * `npm run types`.
 */
export type RetentionEnv = RetentionWorkerTypes.Env;

/**
 * Its settings: the subset of the service's ConfigSchema it reads, so each variable is
 * validated by one definition. Database access goes through the same Neon driver settings
 * (DATABASE_URL, NEON_WS_PROXY, DB_STATEMENT_TIMEOUT_MS) as the main Worker's.
 */
export const RetentionConfigSchema = ConfigSchema.pick({
  DATABASE_URL: true,
  NEON_WS_PROXY: true,
  LOG_LEVEL: true,
  DB_STATEMENT_TIMEOUT_MS: true,
  DB_ISOLATE_MAX_CONNECTIONS: true,
  REACTION_TX_BUDGET_MS: true,
  RETENTION_RECEIPT_DAYS: true,
  RETENTION_FENCE_DAYS: true,
  RETENTION_DRAIN_GRACE_MS: true,
  RETENTION_RUN_DEADLINE_MS: true,
  RETENTION_BATCH_TIMEOUT_MS: true,
  RETENTION_DAILY_DB_BATCHES: true,
  RETENTION_DAILY_WORKER_OPS: true,
});

export type RetentionConfig = z.infer<typeof RetentionConfigSchema>;

const cache = new WeakMap<object, RetentionConfig>();

/**
 * Parses the bindings once per environment object (as loadConfig does for the main Worker):
 * a bad value throws `bad_environment` naming the variable, never its value.
 */
export function loadRetentionConfig(env: RetentionEnv): RetentionConfig {
  const hit = cache.get(env);
  if (hit) return hit;
  const parsed = RetentionConfigSchema.safeParse(env);
  if (!parsed.success) {
    const variable = String(parsed.error.issues[0]?.path[0] ?? 'unknown');
    log.error('bad_environment', { variable, problem: parsed.error.issues[0]?.message });
    throw new AppError('bad_environment', `Environment variable ${variable} is missing or malformed`);
  }
  cache.set(env, parsed.data);
  setLogLevel(parsed.data.LOG_LEVEL);
  bindMetrics(env.METRICS);
  registerDatabaseSecret(parsed.data.DATABASE_URL);
  return parsed.data;
}
