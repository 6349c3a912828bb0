import type { WebhookFormat } from './format';
import type { GateConfig } from './gate';

/** The alerts Tail Worker's bindings (alerts.wrangler.toml; ALERT_WEBHOOK_URL is a secret). */
export interface AlertsEnv {
  ALERT_GATE: DurableObjectNamespace<import('./gate-object').AlertGate>;
  /** Where notifications go; unset: nothing is sent (one `alert_webhook_unset` line per isolate). */
  ALERT_WEBHOOK_URL?: string;
  ALERT_WEBHOOK_FORMAT?: string;
  ALERT_DEDUPE_WINDOW_S?: string;
  ALERT_RATE_PER_MINUTE?: string;
  ALERT_WEBHOOK_TIMEOUT_MS?: string;
  LOG_LEVEL?: string;
}

export interface AlertsConfig extends GateConfig {
  url: string | null;
  format: WebhookFormat;
  timeoutMs: number;
}

/** A positive integer setting, else its default (a typo in a var must not silence alerts). */
function int(raw: string | undefined, fallback: number, max: number): number {
  const n = Number(raw);
  return Number.isInteger(n) && n > 0 ? Math.min(n, max) : fallback;
}

export function alertsConfig(env: AlertsEnv): AlertsConfig {
  const url = env.ALERT_WEBHOOK_URL?.trim();
  return {
    url: url && /^https?:\/\//i.test(url) ? url : null,
    format: env.ALERT_WEBHOOK_FORMAT?.trim().toLowerCase() === 'lark' ? 'lark' : 'slack',
    windowMs: int(env.ALERT_DEDUPE_WINDOW_S, 600, 86_400) * 1000,
    ratePerMinute: int(env.ALERT_RATE_PER_MINUTE, 10, 600),
    timeoutMs: int(env.ALERT_WEBHOOK_TIMEOUT_MS, 3000, 10_000),
  };
}
