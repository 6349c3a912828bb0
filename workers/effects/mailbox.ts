import { AppError } from '../errors';
import { instanceIdOf } from './ids';
import { type InstanceRow, type MailboxRow, type Queryable, RESERVED_KEY_PREFIX } from './types';

const MAX_KEY_LENGTH = 300;

/** Creates the instance if it does not exist yet; returns its id (`<type>:<key>`). */
export async function ensureInstance(
  q: Queryable,
  actorType: string,
  actorKey: string,
  initialState: unknown = {},
): Promise<string> {
  const id = instanceIdOf(actorType, actorKey);
  await q.query(
    `insert into actor_instances (id, actor_type, actor_key, state) values ($1, $2, $3, $4::jsonb)
     on conflict (id) do nothing`,
    [id, actorType, actorKey, JSON.stringify(initialState)],
  );
  return id;
}

export async function loadInstance(q: Queryable, instanceId: string): Promise<InstanceRow | null> {
  const { rows } = await q.query<InstanceRow>(
    'select id, actor_type, actor_key, state, revision, wake_at_ms from actor_instances where id = $1',
    [instanceId],
  );
  return rows[0] ?? null;
}

/**
 * Application enqueue, meant to run inside the application's own transaction (e.g. the
 * webhook records its input and the message together, then wakes the host after commit).
 * Idempotent per (instance, key): a repeated key inserts nothing and returns false.
 * Keys starting `effect:` belong to the runtime and are refused.
 */
export async function enqueueMessage(
  q: Queryable,
  instanceId: string,
  key: string,
  payload: unknown,
  opts: { delayMs?: number } = {},
): Promise<{ inserted: boolean; messageId: string | null }> {
  if (!key || key.length > MAX_KEY_LENGTH)
    throw new AppError('validation_failed', `message key must be 1..${MAX_KEY_LENGTH} characters`);
  if (key.startsWith(RESERVED_KEY_PREFIX))
    throw new AppError('validation_failed', `message keys starting "${RESERVED_KEY_PREFIX}" are reserved`);
  const { rows } = await q.query<{ id: string }>(
    `insert into actor_mailbox (instance_id, message_key, payload, available_at_ms)
     values ($1, $2, $3::jsonb, app_now_ms() + $4::bigint)
     on conflict (instance_id, message_key) do nothing returning id`,
    [instanceId, key, JSON.stringify(payload ?? null), opts.delayMs ?? 0],
  );
  return { inserted: rows.length === 1, messageId: rows[0]?.id ?? null };
}

/**
 * Runtime enqueue (recovery, check responses, callbacks). No `on conflict`: a duplicate
 * key is a bug, and its error must roll back the transition it belongs to. Callers hold
 * the origin instance lock already; the foreign key check reuses it.
 */
export async function enqueueRuntimeMessages(
  q: Queryable,
  instanceId: string,
  messages: { key: string; payload: unknown }[],
): Promise<void> {
  if (messages.length === 0) return;
  await q.query(
    `insert into actor_mailbox (instance_id, message_key, payload)
     select $1, m.key, m.payload::jsonb from unnest($2::text[], $3::text[]) with ordinality as m(key, payload, n)
      order by m.n`,
    [instanceId, messages.map((m) => m.key), messages.map((m) => JSON.stringify(m.payload ?? null))],
  );
}

/** Pending messages of one instance in order (available ones only). */
export async function pendingMessages(
  q: Queryable,
  instanceId: string,
  limit: number,
): Promise<MailboxRow[]> {
  const { rows } = await q.query<MailboxRow>(
    `select id, instance_id, message_key, payload from actor_mailbox
      where instance_id = $1 and state = 'pending' and available_at_ms <= (select app_now_ms())
      order by id limit $2`,
    [instanceId, limit],
  );
  return rows;
}

/** Instances with available pending messages or a due timer (for polling delivery). */
export async function instancesWithWork(q: Queryable, limit: number): Promise<string[]> {
  const { rows } = await q.query<{ id: string }>(
    `(select distinct instance_id as id from actor_mailbox
       where state = 'pending' and available_at_ms <= (select app_now_ms()) limit $1)
     union
     (select id from actor_instances where wake_at_ms <= (select app_now_ms()) limit $1)`,
    [limit],
  );
  return rows.map((r) => r.id);
}

/** Deletes delivered messages past retention, one bounded batch. */
export async function pruneMailbox(q: Queryable, retentionMs: number, batch = 1000): Promise<number> {
  const res = await q.query(
    `delete from actor_mailbox where id in (
       select id from actor_mailbox
        where state = 'delivered' and delivered_at_ms < (select app_now_ms()) - $1::bigint
        limit $2)`,
    [retentionMs, batch],
  );
  return res.rowCount ?? 0;
}
