import { z } from 'zod';
import { AppError } from './errors';
import { API_BASE_RULE, isAllowedApiBase } from './lark/api-base';
import { log, registerSecret } from './log';
import { bindMetrics } from './metrics';

/**
 * Bindings as Cloudflare hands them to the Worker and its Durable Objects: generated from
 * wrangler.toml and .dev.vars.example into worker-configuration.d.ts by `npm run types`
 * (`npm run types:check` fails when it drifts). The type only names the bindings; whether a
 * value is present and well-formed is decided by ConfigSchema below, which also reads the
 * optional settings that have no default and so appear in neither file (AGENT_URL,
 * AGENT_SIGNING_SECRET, ECHO_AGENT_WORD_MS, ECHO_AGENT_FAIL_MARKER, ACTOR_JWKS_URL, ACTOR_JWT_ISSUER, ACTOR_JWT_AUDIENCE).
 */
export type Env = Cloudflare.Env;

const intFromString = (min: number, max: number) => z.coerce.number().int().min(min).max(max);

/** Every variable and secret, validated once per environment object. */
export const ConfigSchema = z.object({
  DATABASE_URL: z.string().regex(/^postgres(ql)?:\/\/\S+$/, 'a postgres:// connection string'),
  NEON_WS_PROXY: z.string().min(1).optional(),
  ADMIN_TOKEN: z.string().min(24, 'at least 24 characters'),
  // The retention cleanup's own credential (enable, stop, rollback; docs/retention.md). Unset:
  // the cleanup cannot be activated. Must differ from ADMIN_TOKEN (checked in loadConfig).
  RETENTION_ADMIN_TOKEN: z.string().min(24, 'at least 24 characters').optional(),
  SECRET_KEYS: z
    .string()
    .transform((raw, ctx) => {
      try {
        return z.record(z.string().regex(/^\d+$/), z.string().min(40)).parse(JSON.parse(raw));
      } catch {
        ctx.addIssue({ code: 'custom', message: 'JSON object {"<version>":"<base64 key>"}' });
        return z.NEVER;
      }
    })
    .refine((keys) => Object.keys(keys).length > 0, 'at least one key'),
  // Installations registered without api_base use it: the same https-or-loopback rule.
  LARK_API_BASE: z
    .string()
    .url()
    .refine(isAllowedApiBase, API_BASE_RULE)
    .default('https://open.larksuite.com'),
  LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error']).default('info'),
  DB_STATEMENT_TIMEOUT_MS: intFromString(100, 60_000).default(5000),
  // Postgres connections one isolate may hold at once, half kept for answers (db/gate.ts).
  DB_ISOLATE_MAX_CONNECTIONS: intFromString(1, 10_000).default(256),
  // Effect runtime (docs/effects.md): liveness floor and candidates per recovery pass.
  EFFECT_STALE_AFTER_MS: intFromString(1000, 3_600_000).default(30_000),
  EFFECT_CLAIM_SCAN_LIMIT: intFromString(1, 10_000).default(100),
  // Failed deliveries before a mailbox message is dead (docs/effects.md, poison messages).
  EFFECT_MAILBOX_MAX_ATTEMPTS: intFromString(1, 100).default(5),
  // Mobile reaction API (workers/reaction-tickets, workers/auth). Actor JWTs: HS256 secret or JWKS.
  ACTOR_JWT_SECRET: z.string().min(32, 'at least 32 characters').optional(),
  ACTOR_JWKS_URL: z.string().url().optional(),
  ACTOR_JWT_ISSUER: z.string().min(1).optional(),
  ACTOR_JWT_AUDIENCE: z.string().min(1).optional(),
  REACTION_TICKET_TTL_SECONDS: intFromString(60, 90 * 86_400).default(7 * 86_400),
  REACTION_TICKET_MAX_OUTSTANDING: intFromString(1, 10_000).default(64),
  REACTION_TICKET_RATE_PER_MINUTE: intFromString(1, 10_000).default(120),
  REACTION_TX_BUDGET_MS: intFromString(100, 30_000).default(4000),
  REACTION_LOCK_TIMEOUT_MS: intFromString(50, 30_000).default(2500),
  // Channel engine (docs/channel.md): debounce before a turn; the agent (echo unless AGENT_URL).
  CHANNEL_DEBOUNCE_MS: intFromString(0, 600_000).default(1500),
  AGENT_URL: z.string().url().optional(),
  // HMAC key of every request to AGENT_URL (workers/agents/signature.ts); required with it.
  AGENT_SIGNING_SECRET: z.string().min(32, 'at least 32 characters').optional(),
  AGENT_TIMEOUT_MS: intFromString(100, 120_000).default(20_000),
  // The echo agent types its answer out to a card reply, one word this many ms apart (npm run
  // dev sets it for the demo); unset, it answers in one piece.
  ECHO_AGENT_WORD_MS: intFromString(1, 5000).optional(),
  // The echo agent fails every turn with an input containing this text, except a re-run of it
  // (npm run dev sets `/fail`, for the console's re-run); unset, it never fails. Dev only: a
  // deployable config that sets it is refused (scripts/lib/deploy-checks.ts).
  ECHO_AGENT_FAIL_MARKER: z.string().min(2).max(64).optional(),
  // Retention cleanup (docs/retention.md): ages, the drain grace past ticket expiry, run bounds.
  // Read by the cleanup's own Worker (retention.wrangler.toml, workers/retention/config.ts).
  RETENTION_RECEIPT_DAYS: intFromString(1, 3650).default(30),
  RETENTION_FENCE_DAYS: intFromString(1, 3650).default(90),
  RETENTION_DRAIN_GRACE_MS: intFromString(1000, 30 * 86_400_000).default(3_600_000),
  RETENTION_RUN_DEADLINE_MS: intFromString(1000, 120_000).default(25_000),
  RETENTION_BATCH_TIMEOUT_MS: intFromString(100, 30_000).default(5000),
  RETENTION_DAILY_DB_BATCHES: intFromString(0, 100_000).default(264),
  RETENTION_DAILY_WORKER_OPS: intFromString(0, 10_000).default(48),
  // Minute housekeeping (docs/retention-rules.md): tickets past expiry + grace, terminal channel
  // history, idle conversations; rows and budget per step.
  HOUSEKEEPING_TICKET_GRACE_DAYS: intFromString(1, 3650).default(30),
  HOUSEKEEPING_CHANNEL_HISTORY_DAYS: intFromString(1, 3650).default(7),
  HOUSEKEEPING_CONVERSATION_IDLE_DAYS: intFromString(8, 3650).default(30),
  HOUSEKEEPING_BATCH_ROWS: intFromString(1, 5000).default(1000),
  HOUSEKEEPING_STEP_BUDGET_MS: intFromString(100, 15_000).default(3000),
  // Durable Object alarms (durable-objects/alarm.ts): `auto` fires them at their time; `manual`
  // (the test harness) parks them so only a test that asks runs a pass.
  DO_ALARMS: z.enum(['auto', 'manual']).default('auto'),
});

/**
 * Rules between variables. With ACTOR_JWKS_URL, ACTOR_JWT_ISSUER and ACTOR_JWT_AUDIENCE are
 * required: a key set verifies every token its provider signs, so without both claims a
 * token the provider minted for another service would be accepted here.
 */
const CheckedConfigSchema = ConfigSchema.superRefine((config, ctx) => {
  // Every agent request is signed: an agent cannot tell this service from anyone else otherwise.
  if (config.AGENT_URL && !config.AGENT_SIGNING_SECRET)
    ctx.addIssue({
      code: 'custom',
      path: ['AGENT_SIGNING_SECRET'],
      message: 'required when AGENT_URL is set',
    });
  if (!config.ACTOR_JWKS_URL) return;
  for (const variable of ['ACTOR_JWT_ISSUER', 'ACTOR_JWT_AUDIENCE'] as const)
    if (!config[variable])
      ctx.addIssue({ code: 'custom', path: [variable], message: 'required when ACTOR_JWKS_URL is set' });
});

export type Config = z.infer<typeof ConfigSchema>;

const cache = new WeakMap<object, Config>();

/**
 * Parses the bindings once per environment object. A bad value throws `bad_environment`
 * naming the variable, never its value, and logs one error.
 */
export function loadConfig(env: Env): Config {
  const hit = cache.get(env);
  if (hit) return hit;
  const parsed = CheckedConfigSchema.safeParse(env);
  if (!parsed.success) {
    const variable = String(parsed.error.issues[0]?.path[0] ?? 'unknown');
    log.error('bad_environment', { variable, problem: parsed.error.issues[0]?.message });
    throw new AppError('bad_environment', `Environment variable ${variable} is missing or malformed`);
  }
  // A scoped credential equal to the general one would scope nothing. (Checked here, not as a
  // refinement: other Workers pick fields from ConfigSchema, which a refined object forbids.)
  if (
    parsed.data.RETENTION_ADMIN_TOKEN !== undefined &&
    parsed.data.RETENTION_ADMIN_TOKEN === parsed.data.ADMIN_TOKEN
  ) {
    log.error('bad_environment', { variable: 'RETENTION_ADMIN_TOKEN', problem: 'equal to ADMIN_TOKEN' });
    throw new AppError(
      'bad_environment',
      'Environment variable RETENTION_ADMIN_TOKEN is missing or malformed',
    );
  }
  cache.set(env, parsed.data);
  registerConfiguredSecrets(parsed.data);
  // Every entry point loads its config first: the one place the metrics sink is bound.
  bindMetrics(env.METRICS);
  return parsed.data;
}

/** Every configured secret value, so log.ts scrubs it from any line under any key. */
function registerConfiguredSecrets(config: Config): void {
  registerSecret(config.ADMIN_TOKEN);
  registerSecret(config.RETENTION_ADMIN_TOKEN);
  registerSecret(config.ACTOR_JWT_SECRET);
  registerSecret(config.AGENT_SIGNING_SECRET);
  for (const material of Object.values(config.SECRET_KEYS)) registerSecret(material);
  registerDatabaseSecret(config.DATABASE_URL);
}

/** The connection string and its password (raw and decoded), for every Worker that connects. */
export function registerDatabaseSecret(databaseUrl: string): void {
  registerSecret(databaseUrl);
  try {
    const url = new URL(databaseUrl.replace(/^postgres(ql)?:/, 'http:'));
    registerSecret(url.password);
    registerSecret(decodeURIComponent(url.password));
  } catch {
    // By design: the schema checked only the scheme; a URL that does not parse has no password part to register.
  }
}
