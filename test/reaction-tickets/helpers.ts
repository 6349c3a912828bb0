import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { signActorToken } from '../../workers/auth/sign';
import worker from '../../workers/index';
import { mintOperationId } from '../../workers/reaction-tickets/operation-id';
import { dbClockOffsetMs, uid } from '../helpers/db';

/** Seeding, requests and database snapshots for the reaction API tests. */
export interface Reply {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: test convenience over JSON bodies
  body: any;
  headers: Headers;
}

async function toReply(res: Response): Promise<Reply> {
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
}

export async function call(
  method: string,
  path: string,
  opts: {
    token?: string;
    body?: unknown;
    rawBody?: string;
    admin?: boolean;
    env?: Record<string, unknown>;
  } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (opts.admin) headers.authorization = `Bearer ${env.ADMIN_TOKEN}`;
  else if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  const init: RequestInit = { method, headers };
  if (opts.rawBody !== undefined) init.body = opts.rawBody;
  else if (opts.body !== undefined) init.body = JSON.stringify(opts.body);
  if (!opts.env) return toReply(await exports.default.fetch(`http://test${path}`, init));
  // A request with overridden bindings (for example tighter quotas), as production would run it.
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request(`http://test${path}`, init), { ...env, ...opts.env }, ctx);
  const reply = await toReply(res);
  await waitOnExecutionContext(ctx);
  return reply;
}

export function tokenFor(
  actorId: string,
  opts: { issuedAt?: number; ttlSeconds?: number } = {},
): Promise<string> {
  return signActorToken(env.ACTOR_JWT_SECRET as string, actorId, opts);
}

/**
 * Signs `actorId` out through the admin API; returns the second the server recorded (JWT
 * `iat` precision): a token issued at or after it is a new session, an earlier one is not.
 */
export async function signOut(actorId: string): Promise<number> {
  const res = await call('POST', `/admin/actors/${actorId}/sign-out`, { admin: true });
  if (res.status !== 200) throw new Error(`sign-out: ${res.status} ${JSON.stringify(res.body)}`);
  return Math.floor(Date.parse(res.body.signedOutAt) / 1000);
}

export interface World {
  workspaceId: string;
  conversationId: string;
  actors: string[];
  outsider: string;
  messages: string[];
  tokens: string[];
  outsiderToken: string;
}

async function admin(method: string, path: string, body: unknown): Promise<void> {
  const res = await call(method, path, { admin: true, body });
  if (res.status !== 200) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
}

/** A fresh workspace, conversation with `members` actors, an outsider and `messageCount` messages. */
export async function seedWorld(members = 2, messageCount = 1): Promise<World> {
  const workspaceId = uid('ws');
  const conversationId = uid('conv');
  await admin('PUT', `/admin/workspaces/${workspaceId}`, { name: 'test' });
  const actors = Array.from({ length: members }, () => uid('actor'));
  const outsider = uid('outsider');
  for (const id of [...actors, outsider]) await admin('PUT', `/admin/actors/${id}`, { workspaceId });
  await admin('PUT', `/admin/conversations/${conversationId}`, { workspaceId, title: 'test' });
  await admin('POST', `/admin/conversations/${conversationId}/members`, { add: actors });
  const messages = Array.from({ length: messageCount }, () => uid('msg'));
  for (const id of messages) await admin('PUT', `/admin/messages/${id}`, { conversationId, body: 'hello' });
  return {
    workspaceId,
    conversationId,
    actors,
    outsider,
    messages,
    tokens: await Promise.all(actors.map((a) => tokenFor(a))),
    outsiderToken: await tokenFor(outsider),
  };
}

/**
 * A new operation ID as the client library mints it: UUIDv7 stamped now, on the test
 * database's clock (so IDs minted after advanceDbClock are fresh, as on a device whose clock
 * moved with the server's). `ageMs` stamps it that long ago (negative: in the future).
 */
export function opId(ageMs = 0): string {
  return mintOperationId(Date.now() + dbClockOffsetMs() - ageMs);
}

export interface IntentInput {
  messageId: string;
  emoji: string;
  desired: 'present' | 'absent';
}

export async function issue(token: string, operationId: string, intent: IntentInput): Promise<Reply> {
  return call('POST', '/v1/reaction-tickets', { token, body: { operationId, ...intent } });
}

export async function ticketFor(token: string, operationId: string, intent: IntentInput): Promise<string> {
  const res = await issue(token, operationId, intent);
  if (res.status !== 201) throw new Error(`ticket: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.ticket;
}

export function put(
  token: string,
  operationId: string,
  ticket: string | undefined,
  intent: IntentInput,
  env?: Record<string, unknown>,
) {
  return call('PUT', `/v1/reaction-operations/${operationId}`, { token, body: { ...intent, ticket }, env });
}

export function retire(token: string, operationId: string, ticket?: string, env?: Record<string, unknown>) {
  const body = ticket ? { ticket } : {};
  return call('POST', `/v1/reaction-operations/${operationId}/retire`, { token, body, env });
}

/** Generous budgets for requests a test deliberately keeps waiting on a lock (slow CI machines). */
export const PATIENT = { REACTION_LOCK_TIMEOUT_MS: '20000', REACTION_TX_BUDGET_MS: '25000' };

export function reactions(token: string, messageId: string) {
  return call('GET', `/v1/messages/${messageId}/reactions`, { token });
}

/** Everything a write could have touched for one message and actor: proves "nothing mutated". */
export async function snapshot(pool: Pool, messageId: string, actorId: string) {
  const { rows } = await pool.query(
    `select (select reaction_version from private.messages where id = $1) as version,
            (select coalesce(json_agg(json_build_object('a', actor_id, 'e', emoji) order by actor_id, emoji), '[]')
               from private.message_reactions where message_id = $1) as reactions,
            (select count(*)::int from private.chat_reaction_operations where actor_id = $2) as receipts,
            (select count(*)::int from private.chat_retired_reaction_operations where actor_id = $2) as fences`,
    [messageId, actorId],
  );
  return rows[0];
}

/** Finds the backend waiting on a lock `holderPid` holds (the request under test). */
export { blockedBehind as blockedBy } from '../helpers/db';

export const DAY_MS = 86_400_000;

/**
 * Reopens the closed legacy contract, which nothing in a migrated database can do: the
 * trigger refuses every reopen (migrations/0020_baseline_reaction_tickets.sql). A test that needs the open state again
 * disables it for its own transaction, as the table's owner; no other session sees it off.
 */
export async function reopenLegacyContract(pool: Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query('alter table private.write_contract_state disable trigger write_contract_no_reopen');
    await client.query(
      "update private.write_contract_state set closed_at = null, drained_at = null, closed_by = null where contract = 'legacy_desired_state'",
    );
    await client.query('alter table private.write_contract_state enable trigger write_contract_no_reopen');
    await client.query('commit');
  } catch (err) {
    await client.query('rollback');
    throw err;
  } finally {
    client.release();
  }
}
