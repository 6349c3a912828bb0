import { env, exports } from 'cloudflare:workers';
import type { RunRecord } from '../../workers/retention/state';
import type { RetentionStatus } from '../../workers/retention/types';
import { fireRetentionCron } from '../helpers/cron';

/**
 * These files run in the `workers` project: the main Worker is under test and the retention
 * cleanup Worker runs beside it (its deploy bundle, an auxiliary Worker), reached through
 * the RETENTION service binding exactly as the admin routes reach it.
 */

// biome-ignore lint/suspicious/noExplicitAny: test convenience over JSON bodies
type Json = any;

export const DAY_MS = 86_400_000;
export const HOUR_MS = 3_600_000;

export async function request(
  method: string,
  path: string,
  opts: { token?: string | null; body?: unknown } = {},
): Promise<{ status: number; body: Json }> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const token = opts.token === undefined ? env.ADMIN_TOKEN : opts.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  const init: RequestInit = { method, headers };
  if (opts.body !== undefined) init.body = JSON.stringify(opts.body);
  const res = await exports.default.fetch(`http://test${path}`, init);
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** An admin request with the general admin token. */
export function admin(method: string, path: string, body?: unknown) {
  return request(method, path, { body });
}

/** The retention cleanup's own credential (RETENTION_ADMIN_TOKEN). */
export const retentionToken = () =>
  (env as unknown as { RETENTION_ADMIN_TOKEN: string }).RETENTION_ADMIN_TOKEN;

/** A request with the retention cleanup's own credential: enable, stop, rollback. */
export function scoped(method: string, path: string, body?: unknown) {
  return request(method, path, { token: retentionToken(), body });
}

export const OPERATOR = 'test@example.com';

/** The cleanup's status as the main Worker reads it (through RETENTION). */
export function cleanupStatus(): Promise<RetentionStatus> {
  return env.RETENTION.status() as Promise<RetentionStatus>;
}

export async function currentGeneration(): Promise<number> {
  const control = (await cleanupStatus()).control;
  if (!control) throw new Error('status: the control row did not answer');
  return control.generation;
}

export async function closeLegacyContract(): Promise<void> {
  const res = await admin('POST', '/admin/reaction-contract/legacy/close');
  if (res.status !== 200) throw new Error(`close: ${res.status} ${JSON.stringify(res.body)}`);
}

export async function enable(): Promise<void> {
  const res = await scoped('POST', '/admin/retention/enable', {
    generation: await currentGeneration(),
    operator: OPERATOR,
  });
  if (res.status !== 200) throw new Error(`enable: ${res.status} ${JSON.stringify(res.body)}`);
}

/** Hourly ticks with strictly increasing scheduled times (a repeated time is a duplicate). */
let tick = Date.UTC(2030, 0, 1);
export function nextTickTime(): number {
  tick += HOUR_MS;
  return tick;
}

/**
 * One hourly tick of the retention Worker's cron; the run it recorded, or null when it ran
 * nothing (disabled, duplicate).
 */
export async function runOnce(scheduledTime = nextTickTime()): Promise<RunRecord | null> {
  const before = (await cleanupStatus()).history.length;
  await fireRetentionCron(scheduledTime);
  const { history } = await cleanupStatus();
  return history.length > before || history[0]?.scheduledTime === scheduledTime ? history[0]! : null;
}
