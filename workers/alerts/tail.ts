/**
 * The alerts Tail Worker's work (worker.ts is its entry, which may export handlers only).
 * reaction-ledger-alerts: the Tail Worker both Workers name in `tail_consumers`
 * (docs/operations.md "Alerts"). It reads the structured lines of each finished invocation,
 * keeps the alert-class ones (events.ts), asks the AlertGate object which of them to send
 * (dedupe per key and window, rate limit), and POSTs those to ALERT_WEBHOOK_URL as Slack or
 * Lark JSON (format.ts).
 *
 * Fails open: a Tail Worker runs after the producer's invocation has answered, in its own
 * invocation, so nothing here can delay or fail a request; on top of that every step is
 * bounded (the gate call, each POST) and caught, and a failure is one log line of its own.
 */

import { withTimeout } from '../lib/timeout';
import { log, registerSecret, setLogLevel } from '../log';
import { type AlertsConfig, type AlertsEnv, alertsConfig } from './config';
import { type AlertLine, classify } from './events';
import { notificationText, payload } from './format';
import { type Admitted, admit, emptyGate, type GateState } from './gate';

/** This Worker's name (alerts.wrangler.toml): its own traces, if ever bound, are not re-read. */
export const ALERTS_WORKER_NAME = 'reaction-ledger-alerts';
const GATE_BUDGET_MS = 2000;
export const UNKNOWN_WORKER = 'a local Worker';

/** Per isolate: the fallback gate when the object cannot be reached, and the once-only lines. */
const localGate: GateState = emptyGate();
let warnedUnset = false;

export function alertLines(events: readonly TraceItem[]): AlertLine[] {
  const lines: AlertLine[] = [];
  for (const item of events) {
    // Set in production; null under wrangler dev and Miniflare.
    const worker = item.scriptName ?? UNKNOWN_WORKER;
    if (worker === ALERTS_WORKER_NAME) continue;
    for (const entry of item.logs ?? []) {
      const line = classify(worker, entry.message);
      if (line) lines.push(line);
    }
  }
  return lines;
}

async function decide(env: AlertsEnv, config: AlertsConfig, keys: string[]): Promise<Admitted[]> {
  try {
    const gate = env.ALERT_GATE.get(env.ALERT_GATE.idFromName('global'));
    return await withTimeout(
      gate.admit(keys, { windowMs: config.windowMs, ratePerMinute: config.ratePerMinute }),
      GATE_BUDGET_MS,
      () => new Error('alert gate timeout'),
    );
  } catch (err) {
    // The shared gate is unreachable: this isolate's own gate still dedupes and rate-limits
    // what it sees (other isolates may send the same alert once more).
    log.warn('alert_gate_unavailable', { error: err });
    return admit(localGate, keys, Date.now(), config);
  }
}

async function send(config: AlertsConfig, body: unknown): Promise<string | null> {
  try {
    const res = await fetch(config.url!, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(config.timeoutMs),
    });
    // The body is not needed; reading nothing releases the connection.
    await res.body?.cancel();
    return res.ok ? null : `HTTP ${res.status}`;
  } catch (err) {
    return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  }
}

export async function handleTail(events: readonly TraceItem[], env: AlertsEnv): Promise<void> {
  setLogLevel(env.LOG_LEVEL === 'warn' || env.LOG_LEVEL === 'error' ? env.LOG_LEVEL : 'info');
  const lines = alertLines(events);
  if (lines.length === 0) return;
  const config = alertsConfig(env);
  if (!config.url) {
    if (!warnedUnset) log.warn('alert_webhook_unset', { alerts: lines.length });
    warnedUnset = true;
    return;
  }
  // The webhook URL holds the channel's credential (Slack's and Lark's are bearer URLs).
  registerSecret(config.url);
  const byKey = new Map(lines.map((l) => [l.dedupeKey, l]));
  const admitted = await decide(
    env,
    config,
    lines.map((l) => l.dedupeKey),
  );
  const windowMinutes = Math.round(config.windowMs / 60_000);
  const failures = (
    await Promise.all(
      admitted.map((a) =>
        send(config, payload(config.format, notificationText(byKey.get(a.dedupeKey)!, a, windowMinutes))),
      ),
    )
  ).filter((f): f is string => f !== null);
  // One line per batch, however many notifications failed: a dead webhook is one incident.
  if (failures.length)
    log.warn('alert_delivery_failed', { failed: failures.length, of: admitted.length, error: failures[0] });
}
