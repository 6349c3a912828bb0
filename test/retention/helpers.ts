import {
  createExecutionContext,
  createScheduledController,
  runInDurableObject,
  waitOnExecutionContext,
} from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import type { RetentionCleanup } from '../../durable-objects/retention-cleanup';
import { systemClock } from '../../workers/clock';
import worker from '../../workers/index';
import type { ScheduledResult } from '../../workers/retention/types';
import { uid } from '../helpers/db';

// biome-ignore lint/suspicious/noExplicitAny: test convenience over JSON bodies
type Json = any;

export const DAY_MS = 86_400_000;
export const HOUR_MS = 3_600_000;

export const owner = () => env.RETENTION_CLEANUP.get(env.RETENTION_CLEANUP.idFromName('singleton'));

export async function admin(
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: Json }> {
  const init: RequestInit = {
    method,
    headers: { authorization: `Bearer ${env.ADMIN_TOKEN}`, 'content-type': 'application/json' },
  };
  if (body !== undefined) init.body = JSON.stringify(body);
  const res = await exports.default.fetch(`http://test${path}`, init);
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** Hourly ticks with strictly increasing scheduled times (a repeated time is a duplicate). */
let tick = Date.UTC(2030, 0, 1);
export function nextTickTime(): number {
  tick += HOUR_MS;
  return tick;
}

export function runOnce(scheduledTime = nextTickTime()): Promise<ScheduledResult> {
  return owner().scheduledRun(scheduledTime);
}

/** The `0 * * * *` cron as Cloudflare delivers it, through the Worker's scheduled handler. */
export async function cronTick(scheduledTime = nextTickTime()): Promise<void> {
  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ cron: '0 * * * *', scheduledTime }), env, ctx);
  await waitOnExecutionContext(ctx);
}

export async function closeLegacyContract(): Promise<void> {
  const res = await admin('POST', '/admin/reaction-contract/legacy/close');
  if (res.status !== 200) throw new Error(`close: ${res.status} ${JSON.stringify(res.body)}`);
}

/** The generation an enable must carry: the database's, as the status shows it. */
export async function currentGeneration(): Promise<number> {
  const control = (await owner().status()).control;
  if (!control) throw new Error('status: the control row did not answer');
  return control.generation;
}

export async function enable(): Promise<void> {
  const res = await admin('POST', '/admin/retention/enable', { generation: await currentGeneration() });
  if (res.status !== 200) throw new Error(`enable: ${res.status} ${JSON.stringify(res.body)}`);
}

/**
 * Fresh budgets and the system clock, so a test does not inherit what an earlier test of the
 * same file spent or set (this file's owner is its own: no other file touches it). With
 * `sweep`, also a fresh sweep (no cursor): rows a test seeds behind the previous test's
 * cursor would otherwise wait for the next sweep, as they would in production.
 */
export async function resetOwner(opts: { sweep?: boolean } = { sweep: true }): Promise<void> {
  await runInDurableObject(owner(), async (instance: RetentionCleanup, state) => {
    instance.clock = systemClock;
    state.storage.sql.exec(
      'update cleanup_state set db_batches_used = 0, worker_ops_used = 0, db_batch_budget = null, worker_op_budget = null',
    );
    if (opts.sweep) state.storage.sql.exec('update cleanup_state set cursor = null');
  });
}

export interface Directory {
  workspaceId: string;
  actorId: string;
  conversationId: string;
  messageId: string;
}

export async function seedDirectory(pool: Pool): Promise<Directory> {
  const d = {
    workspaceId: uid('ws'),
    actorId: uid('actor'),
    conversationId: uid('conv'),
    messageId: uid('msg'),
  };
  await pool.query(
    `with w as (insert into private.workspaces (id) values ($1)),
          a as (insert into private.actors (id, workspace_id) values ($2, $1)),
          c as (insert into private.conversations (id, workspace_id) values ($3, $1))
     select 1`,
    [d.workspaceId, d.actorId, d.conversationId],
  );
  await pool.query('insert into private.messages (id, workspace_id, conversation_id) values ($1, $2, $3)', [
    d.messageId,
    d.workspaceId,
    d.conversationId,
  ]);
  return d;
}

export interface RowSpec {
  /** created_at = app_now() - ageMs (+ i ms for row i, so key order is insertion order). */
  ageMs: number;
  /** ticket_expires_at = app_now() - expiredAgoMs; omitted for legacy rows. */
  expiredAgoMs?: number;
  contract?: 'ticket' | 'legacy';
}

/** Inserts `n` receipts for the directory's actor; returns their operation IDs in key order. */
export async function seedReceipts(pool: Pool, d: Directory, n: number, spec: RowSpec): Promise<string[]> {
  const prefix = uid('op');
  const contract = spec.contract ?? 'ticket';
  await pool.query(
    `insert into private.chat_reaction_operations
       (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, outcome,
        reaction_version, contract, ticket_expires_at, created_at)
     select $1, $2 || '-' || lpad(g::text, 6, '0'), $3, $4, $5, 'x', 'present', 'added', 1, $6,
       case when $6 = 'ticket' then app_now() - $7::bigint * interval '1 ms' end,
       app_now() - $8::bigint * interval '1 ms' + g * interval '1 ms'
     from generate_series(1, $9::int) g`,
    [
      d.actorId,
      prefix,
      d.workspaceId,
      d.conversationId,
      d.messageId,
      contract,
      spec.expiredAgoMs ?? 0,
      spec.ageMs,
      n,
    ],
  );
  return Array.from({ length: n }, (_, i) => `${prefix}-${String(i + 1).padStart(6, '0')}`);
}

export async function seedFences(pool: Pool, d: Directory, n: number, spec: RowSpec): Promise<string[]> {
  const prefix = uid('op');
  const contract = spec.contract ?? 'ticket';
  await pool.query(
    `insert into private.chat_retired_reaction_operations
       (actor_id, operation_id, workspace_id, message_id, contract, ticket_expires_at, created_at)
     select $1, $2 || '-' || lpad(g::text, 6, '0'), $3, $4, $5,
       case when $5 = 'ticket' then app_now() - $6::bigint * interval '1 ms' end,
       app_now() - $7::bigint * interval '1 ms' + g * interval '1 ms'
     from generate_series(1, $8::int) g`,
    [d.actorId, prefix, d.workspaceId, d.messageId, contract, spec.expiredAgoMs ?? 0, spec.ageMs, n],
  );
  return Array.from({ length: n }, (_, i) => `${prefix}-${String(i + 1).padStart(6, '0')}`);
}

export async function countRows(pool: Pool, d: Directory): Promise<{ receipts: number; fences: number }> {
  const { rows } = await pool.query<{ receipts: number; fences: number }>(
    `select (select count(*)::int from private.chat_reaction_operations where actor_id = $1) as receipts,
            (select count(*)::int from private.chat_retired_reaction_operations where actor_id = $1) as fences`,
    [d.actorId],
  );
  return rows[0]!;
}

export { blockedBehind } from '../helpers/db';
