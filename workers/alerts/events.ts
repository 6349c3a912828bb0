/**
 * The alert-class events: every event docs/operations.md lists under "Alerts to set" and
 * "Every caught failure has an event", at the level it lists (test/node/alerts/events.test.ts
 * holds this table and the doc's tables equal). An event not here is never delivered.
 *
 * `key`: the fields that say *which* thing is failing (a workspace, a route, a step). One
 * notification per (Worker, event, key values) per dedupe window; per-occurrence ids (row,
 * request, effect ids) are never part of a key, or a burst would notify once per row.
 * `deliver: false`: an audit line, not an alert (the doc says so); it is recognised and dropped.
 */
export type AlertLevel = 'info' | 'warn' | 'error';

export interface AlertRule {
  level: AlertLevel;
  key: readonly string[];
  deliver?: false;
}

export const ALERTS: Readonly<Record<string, AlertRule>> = {
  // "Alerts to set"
  rate_limit_unavailable: { level: 'warn', key: ['scope'] },
  db_unavailable: { level: 'warn', key: ['path'] },
  db_tx_retry: { level: 'warn', key: ['sqlstate'] },
  db_tx_retry_abandoned: { level: 'warn', key: ['sqlstate'] },
  console_sign_in_refused: { level: 'warn', key: [] },
  db_gate_permit_expired: { level: 'error', key: ['priority'] },
  typing_maintenance_step_failed: { level: 'error', key: ['step'] },
  typing_maintenance_failed: { level: 'error', key: [] },
  typing_indicators_expired: { level: 'warn', key: ['workspaceId'] },
  typing_taskless_indicators_expired: { level: 'warn', key: ['workspaceId'] },
  typing_add_skipped: { level: 'warn', key: ['reason', 'workspaceId'] },
  typing_withdraw_failed: { level: 'warn', key: ['outcome', 'code'] },
  typing_withdraw_error: { level: 'error', key: ['stage'] },
  typing_withdraw_current_credentials: { level: 'info', key: ['refusedCode'] },
  // "one line per operator removal …; audit trail": the console's audit shows it.
  typing_manual_removal: { level: 'info', key: [], deliver: false },
  typing_add_failed: { level: 'warn', key: ['outcome', 'code'] },
  lark_rate_limit_record_failed: { level: 'warn', key: ['appId', 'route'] },
  lark_bot_identity_failed: { level: 'warn', key: ['installationId'] },
  lark_bot_identity_store_failed: { level: 'warn', key: ['installationId'] },
  typing_add_error: { level: 'error', key: [] },
  typing_retry_schedule_failed: { level: 'warn', key: [] },
  typing_add_record_failed: { level: 'warn', key: ['stage'] },
  // "Every caught failure has an event"
  typing_maintenance_arm_failed: { level: 'error', key: [] },
  effect_minute_failed: { level: 'error', key: [] },
  effect_recovery_pass_failed: { level: 'error', key: [] },
  effect_poll_failed: { level: 'error', key: [] },
  effect_wake_failed: { level: 'warn', key: ['via'] },
  effect_retention_failed: { level: 'error', key: ['table'] },
  effect_attempt_failed: { level: 'warn', key: ['kind'] },
  effects_dead: { level: 'warn', key: [] },
  actor_message_dead: { level: 'error', key: [] },
  actor_host_pump_failed: { level: 'error', key: [] },
  actor_host_heartbeat_failed: { level: 'error', key: [] },
  actor_host_retry_arm_failed: { level: 'error', key: [] },
  actor_host_pump_deferred: { level: 'warn', key: [] },
  shape_version_refused: { level: 'error', key: ['shape', 'version'] },
  housekeeping_failed: { level: 'error', key: [] },
  housekeeping_step_failed: { level: 'error', key: ['step'] },
  cron_failed: { level: 'error', key: ['cron'] },
  retention_run_failed: { level: 'error', key: ['code'] },
  retention_enabled: { level: 'info', key: [] },
  retention_stop_acknowledged: { level: 'info', key: ['action'] },
  retention_stop_unconfirmed: { level: 'error', key: [] },
  retention_status_control_unavailable: { level: 'warn', key: [] },
  retention_rollback_contract_unread: { level: 'warn', key: [] },
  health_db_down: { level: 'warn', key: [] },
  db_pool_error: { level: 'error', key: [] },
  db_connect_callback_failed: { level: 'error', key: [] },
  // A busy isolate is healthy (docs/operations.md "Health check"), but saturated: worth one
  // notification per dedupe window.
  health_db_busy: { level: 'info', key: [] },
  db_connection_lost: { level: 'warn', key: [] },
  lark_after_answer_failed: { level: 'error', key: [] },
  channel_wake_failed: { level: 'warn', key: [] },
  dead_letters_wake_failed: { level: 'warn', key: [] },
};

/** One alert-class log line, as the Tail Worker read it from a producer's trace. */
export interface AlertLine {
  /** The Worker that logged it (the trace's scriptName). */
  worker: string;
  event: string;
  level: AlertLevel;
  /** `worker|event|key values`: what dedupe counts per window. */
  dedupeKey: string;
  /** The line's fields, redacted again here (workers/alerts/format.ts). */
  fields: Record<string, unknown>;
}

/** A key value as text, bounded: keys are stored by the gate and shown in notifications. */
const MAX_KEY_PART = 64;
const keyPart = (v: unknown) =>
  (v === undefined || v === null ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v)).slice(
    0,
    MAX_KEY_PART,
  );

export function dedupeKey(worker: string, event: string, fields: Record<string, unknown>): string {
  const rule = ALERTS[event];
  return [worker, event, ...(rule?.key ?? []).map((k) => `${k}=${keyPart(fields[k])}`)].join('|');
}

/**
 * A console message (the arguments of one console call) as an alert line, or null: only a
 * single JSON object with a delivered alert-class `event` counts (workers/log.ts writes each
 * line as one string). Anything else a Worker prints is never forwarded.
 */
export function classify(worker: string, message: unknown): AlertLine | null {
  const parts = Array.isArray(message) ? message : [message];
  if (parts.length !== 1 || typeof parts[0] !== 'string' || !parts[0].startsWith('{')) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(parts[0]);
  } catch {
    // Not a structured line (a library's console output that starts with a brace): not an alert.
    return null;
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return null;
  const { event, level: _level, time: _time, ...fields } = parsed as Record<string, unknown>;
  if (typeof event !== 'string' || !Object.hasOwn(ALERTS, event)) return null;
  const rule = ALERTS[event]!;
  if (rule.deliver === false) return null;
  return { worker, event, level: rule.level, dedupeKey: dedupeKey(worker, event, fields), fields };
}
