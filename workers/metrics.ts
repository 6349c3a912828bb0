/**
 * Metrics over time: one Workers Analytics Engine data point per measured event, written to the
 * `METRICS` dataset binding (wrangler.toml; `reaction_ledger` in production). Operators graph
 * them with the SQL API (docs/operations.md "Metrics"); locally Analytics Engine keeps nothing,
 * and the console reads the same facts from Postgres.
 *
 * One shape for every point, so one query style serves them all:
 *   index1  = metric name (the sampling key: points of one metric are sampled together)
 *   blob1   = metric name, blob2 = outcome or kind, blob3 = scope (route, installation, class)
 *   double1 = the value (milliseconds, rows), double2 = 1 (a count, weighted by _sample_interval)
 *
 * Writing never fails the caller: writeDataPoint is fire-and-forget on the platform, and a
 * throw (a binding gone wrong) is logged once per isolate and then ignored, like the rate
 * limiter (workers/rate-limit.ts): metrics are for graphs, never a reason to drop an answer.
 * Labels are never secrets: outcome codes, route names and ids the logs print too.
 */
import { log } from './log';

export type MetricName =
  /** HTTP answers by route group and stable code (ticket outcomes are the /v1 rows). */
  | 'http_answer_ms'
  /** Lark Open API calls by route and outcome (reaction Add/withdraw, reply, token). */
  | 'lark_call_ms'
  /** The agent's answer time by outcome. */
  | 'agent_ms'
  /** Turn latency: the turn's first input to its reply posted (or its failure). */
  | 'turn_ms'
  /** Typing badge lifetime: row created to confirmed gone. */
  | 'badge_lifetime_ms'
  /** Retention cleanup batches: rows deleted, by table. */
  | 'retention_batch_rows'
  /** Time a connection waited for a place at the isolate's gate, by priority class. */
  | 'db_gate_wait_ms';

/** The part of an Analytics Engine dataset this module uses. */
export interface MetricsSink {
  writeDataPoint(point: { indexes?: string[]; blobs?: string[]; doubles?: number[] }): void;
}

/** Blobs are capped by the platform (16 KiB each in all); labels here are short codes. */
const MAX_LABEL = 96;

let sink: MetricsSink | undefined;
let failureLogged = false;

/**
 * Points go to this dataset from now on in this isolate. Called at every entry point (fetch,
 * scheduled, a Durable Object's constructor) with `env.METRICS`; the binding is the same object
 * for every request of the isolate, so keeping it is safe (it is not a per-request I/O object).
 */
export function bindMetrics(dataset: MetricsSink | undefined): void {
  if (dataset) sink = dataset;
}

/** The data point for one event (exported for its test). */
export function dataPoint(name: MetricName, value: number, outcome = '', scope = '') {
  return {
    indexes: [name],
    blobs: [name, outcome.slice(0, MAX_LABEL), scope.slice(0, MAX_LABEL)],
    doubles: [Number.isFinite(value) ? value : 0, 1],
  };
}

/** Records one event; never throws. */
export function metric(name: MetricName, value: number, outcome?: string, scope?: string): void {
  if (!sink) return;
  try {
    sink.writeDataPoint(dataPoint(name, value, outcome, scope));
  } catch (err) {
    // By design ignored after one line: see the module comment.
    if (!failureLogged) {
      failureLogged = true;
      log.warn('metrics_write_failed', { metric: name, error: err });
    }
  }
}

/** Milliseconds since `start` (a `Date.now()` reading), for the latency metrics. */
export function since(start: number): number {
  return Date.now() - start;
}
