import { runInDurableObject } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import type { RetentionCleanup } from '../../durable-objects/retention-cleanup';
import { systemClock } from '../../workers/clock';
import { closeLegacyContract as closeContract } from '../../workers/reaction-tickets/contract';
import type { RetentionEnv } from '../../workers/retention/config';
import type { Actor } from '../../workers/retention/control';
import type { ScheduledResult } from '../../workers/retention/types';
import type RetentionWorker from '../../workers/retention/worker';
import { uid } from '../helpers/db';

/**
 * These files run in the `retention` project: the Worker under test is the retention
 * cleanup Worker (retention.wrangler.toml), so `env` holds its bindings.
 */
const renv = env as unknown as RetentionEnv;

export const DAY_MS = 86_400_000;
export const HOUR_MS = 3_600_000;

export const owner = () => renv.RETENTION_CLEANUP.get(renv.RETENTION_CLEANUP.idFromName('singleton'));

/**
 * runInDurableObject on the owner. Its typing expects an object over the main Worker's Env;
 * RetentionCleanup's is RetentionEnv.
 */
export function inOwner<R>(
  fn: (instance: RetentionCleanup, state: DurableObjectState) => R | Promise<R>,
): Promise<R> {
  const stub = owner() as unknown as DurableObjectStub<DurableObject & Rpc.DurableObjectBranded>;
  return runInDurableObject(stub, (instance, state) => fn(instance as unknown as RetentionCleanup, state));
}

/** Who the tests say they are when they enable, stop or roll back (the routes fill this in). */
export const ACTOR: Actor = {
  operator: 'test@example.com',
  credential: 'retention_admin',
  requestId: 'test',
};

/** The cleanup Worker's entrypoint: the RPC methods the main Worker's admin routes call through RETENTION. */
export const cleanupWorker = () => exports.default as unknown as Service<typeof RetentionWorker>;

/** Hourly ticks with strictly increasing scheduled times (a repeated time is a duplicate). */
let tick = Date.UTC(2030, 0, 1);
export function nextTickTime(): number {
  tick += HOUR_MS;
  return tick;
}

export function runOnce(scheduledTime = nextTickTime()): Promise<ScheduledResult> {
  return owner().scheduledRun(scheduledTime);
}

/** The `0 * * * *` tick: the Worker's scheduled handler with what a Cron Trigger passes. */
export async function cronTick(scheduledTime = nextTickTime()): Promise<void> {
  const worker = cleanupWorker() as unknown as {
    scheduled(controller: { cron: string; scheduledTime: number }): Promise<void>;
  };
  await worker.scheduled({ cron: '0 * * * *', scheduledTime });
}

/** Closes the legacy write contract in the database (the main Worker's admin route does the same). */
export async function closeLegacyContract(pool: Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await closeContract(client, 'test');
    await client.query('commit');
  } finally {
    client.release();
  }
}

/** The generation an enable must carry: the database's, as the status shows it. */
export async function currentGeneration(): Promise<number> {
  const control = (await owner().status()).control;
  if (!control) throw new Error('status: the control row did not answer');
  return control.generation;
}

export async function enable(): Promise<void> {
  const res = await cleanupWorker().enable({ generation: await currentGeneration(), actor: ACTOR });
  if (!res.enabled) throw new Error(`enable: ${JSON.stringify(res)}`);
}

/**
 * Fresh budgets and the system clock, so a test does not inherit what an earlier test of the
 * same file spent or set (this file's owner is its own: no other file touches it). With
 * `sweep`, also a fresh sweep (no cursor): rows a test seeds behind the previous test's
 * cursor would otherwise wait for the next sweep, as they would in production.
 */
export async function resetOwner(opts: { sweep?: boolean } = { sweep: true }): Promise<void> {
  await inOwner(async (instance, state) => {
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
