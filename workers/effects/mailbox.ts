import { AppError } from '../errors';
import { instanceIdOf } from './ids';
import { type InstanceRow, type MailboxRow, type Queryable, RESERVED_KEY_PREFIX } from './types';

const MAX_KEY_LENGTH = 300;

/**
 * The SQL of `ensureInstance` and `enqueueMessage`, shared with callers that must write the
 * instance and its message inside their own single statement (channel/accept.ts chains them
 * as CTEs): one text, so a change to these tables cannot leave a copy behind. Every field
 * is a SQL expression in the caller's statement. `from` names a relation whose rows gate
 * the insert (one row = one insert; none = nothing written).
 */
interface InsertInstanceSql {
  /** Must equal `instanceIdOf(actorType, actorKey)`. */
  id: string;
  actorType: string;
  actorKey: string;
  /** jsonb; `ensureInstance` defaults to `'{}'`. */
  state: string;
  from?: string;
}

function insertInstanceSql(x: InsertInstanceSql): string {
  return `insert into actor_instances (id, actor_type, actor_key, state)
  select ${x.id}, ${x.actorType}, ${x.actorKey}, ${x.state}${x.from ? ` from ${x.from}` : ''}
  on conflict (id) do nothing`;
}

interface InsertMessageSql {
  instanceId: string;
  /** text; the caller owns `enqueueMessage`'s rules: 1..300 characters, never `effect:`. */
  key: string;
  /** jsonb */
  payload: string;
  /** bigint milliseconds after app_now_ms(); default 0. */
  delayMs?: string;
  from?: string;
}

function insertMessageSql(x: InsertMessageSql): string {
  return `insert into actor_mailbox (instance_id, message_key, payload, available_at_ms)
  select ${x.instanceId}, ${x.key}, ${x.payload}, app_now_ms() + ${x.delayMs ?? '0'}${x.from ? ` from ${x.from}` : ''}
  on conflict (instance_id, message_key) do nothing`;
}

/**
 * `ensureInstance` + `enqueueMessage` as two data-modifying CTEs named `instance` and
 * `mailbox` (no trailing comma), for a caller's own `with` chain. The mailbox row's foreign
 * key to actor_instances is checked at the end of the statement, so the sibling insert
 * satisfies it. `instanceId` must equal `instanceIdOf(actorType, actorKey)`, as
 * `ensureInstance` computes it. Both return nothing; read the gating relation to know what
 * was written.
 */
export function enqueueCtes(
  x: Omit<InsertInstanceSql, 'id' | 'from'> & InsertMessageSql & { from: string },
): string {
  return `instance as (
  ${insertInstanceSql({ ...x, id: x.instanceId })}
), mailbox as (
  ${insertMessageSql(x)}
)`;
}

/** Creates the instance if it does not exist yet; returns its id (`<type>:<key>`). */
export async function ensureInstance(
  q: Queryable,
  actorType: string,
  actorKey: string,
  initialState: unknown = {},
): Promise<string> {
  const id = instanceIdOf(actorType, actorKey);
  await q.query(insertInstanceSql({ id: '$1', actorType: '$2', actorKey: '$3', state: '$4::jsonb' }), [
    id,
    actorType,
    actorKey,
    JSON.stringify(initialState),
  ]);
  return id;
}

export async function loadInstance(q: Queryable, instanceId: string): Promise<InstanceRow | null> {
  const { rows } = await q.query<InstanceRow>(
    'select id, actor_type, actor_key, state, revision, wake_at_ms from actor_instances where id = $1',
    [instanceId],
  );
  return rows[0] ?? null;
}

/** What a delivery step reads before it runs a handler (`nextDelivery`). */
export interface NextDelivery {
  inst: InstanceRow;
  /** The oldest available pending message, if any. */
  msg: MailboxRow | undefined;
  /** Database time (ms) the message's availability was judged at: the handler's `nowMs`. */
  nowMs: number;
}

/**
 * The instance, its oldest available message and the database's now, in ONE statement (one
 * round trip, one snapshot; they were three: the drain step's reads were most of an actor
 * host's round trips, bench/suites/50-channel.ts). Null when the instance does not exist.
 * The message's availability and a timer's due-ness are judged at the same now.
 */
export async function nextDelivery(q: Queryable, instanceId: string): Promise<NextDelivery | null> {
  const { rows } = await q.query<
    InstanceRow & {
      now: string;
      m_id: string | null;
      m_message_key: string;
      m_payload: unknown;
      m_attempts: number;
    }
  >(
    `with clock as (select app_now_ms() as now)
     select i.id, i.actor_type, i.actor_key, i.state, i.revision, i.wake_at_ms, clock.now,
            m.id as m_id, m.message_key as m_message_key, m.payload as m_payload, m.attempts as m_attempts
       from actor_instances i
      cross join clock
       left join lateral (
         select id, message_key, payload, attempts from actor_mailbox
          where instance_id = i.id and state = 'pending' and available_at_ms <= clock.now
          order by id limit 1) m on true
      where i.id = $1`,
    [instanceId],
  );
  const row = rows[0];
  if (!row) return null;
  const inst: InstanceRow = {
    id: row.id,
    actor_type: row.actor_type,
    actor_key: row.actor_key,
    state: row.state,
    revision: row.revision,
    wake_at_ms: row.wake_at_ms,
  };
  const msg: MailboxRow | undefined =
    row.m_id === null
      ? undefined
      : {
          id: row.m_id,
          instance_id: row.id,
          message_key: row.m_message_key,
          payload: row.m_payload,
          attempts: row.m_attempts,
        };
  return { inst, msg, nowMs: Number(row.now) };
}

/**
 * Application enqueue, meant to run inside the application's own transaction (e.g. the
 * webhook records its input and the message together, then wakes the host after commit).
 * Idempotent per (instance, key): a repeat of the same payload inserts nothing and returns
 * false with the stored id; a different payload under a stored key throws `conflict`.
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
  const payloadJson = JSON.stringify(payload ?? null);
  const { rows } = await q.query<{ id: string }>(
    `${insertMessageSql({ instanceId: '$1', key: '$2', payload: '$3::jsonb', delayMs: '$4::bigint' })} returning id`,
    [instanceId, key, payloadJson, opts.delayMs ?? 0],
  );
  if (rows[0]) return { inserted: true, messageId: rows[0].id };
  // The key is taken. A repeat of the same message is idempotent; a different payload under
  // the same key would otherwise be dropped without a word, so it is the caller's conflict.
  // A separate statement: it sees a row a concurrent transaction committed after ours began.
  const existing = await q.query<{ id: string; same: boolean }>(
    `select id, payload = $3::jsonb as same from actor_mailbox where instance_id = $1 and message_key = $2`,
    [instanceId, key, payloadJson],
  );
  const row = existing.rows[0];
  if (row && !row.same)
    throw new AppError('conflict', 'a different message is already stored under this key', { key });
  // No row: the holder was pruned between the two statements; nothing of ours was written.
  return { inserted: false, messageId: row?.id ?? null };
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
  await q.query(runtimeMessagesSql('$1', '$2', '$3'), [instanceId, ...runtimeMessagesParams(messages)]);
}

/**
 * `enqueueRuntimeMessages` as SQL text, for a caller that ends its own `with` chain of
 * transitions with it (recovery-decide.ts): one text, so the two cannot drift. Arguments
 * are parameter placeholders: the instance id, then `runtimeMessagesParams`' two arrays.
 * Messages get their ids (delivery order) in array order.
 */
export function runtimeMessagesSql(instanceId: string, keys: string, payloads: string): string {
  return `insert into actor_mailbox (instance_id, message_key, payload)
     select ${instanceId}, m.key, m.payload::jsonb
       from unnest(${keys}::text[], ${payloads}::text[]) with ordinality as m(key, payload, n)
      order by m.n`;
}

/** The keys and JSON payloads `runtimeMessagesSql` takes, in order. */
export function runtimeMessagesParams(messages: { key: string; payload: unknown }[]): [string[], string[]] {
  return [messages.map((m) => m.key), messages.map((m) => JSON.stringify(m.payload ?? null))];
}

/** Pending messages of one instance in order (available ones only). */
export async function pendingMessages(
  q: Queryable,
  instanceId: string,
  limit: number,
): Promise<MailboxRow[]> {
  const { rows } = await q.query<MailboxRow>(
    `select id, instance_id, message_key, payload, attempts from actor_mailbox
      where instance_id = $1 and state = 'pending' and available_at_ms <= (select app_now_ms())
      order by id limit $2`,
    [instanceId, limit],
  );
  return rows;
}

/**
 * Counts one failed delivery of a pending message (its handler threw, or its commit failed).
 * At `maxAttempts` the message becomes `dead`: terminal, never redelivered, pruned like a
 * delivered one. Only the error text is kept, truncated: never the payload. One statement on
 * one mailbox row, outside any transaction: it takes no other lock. A message another commit
 * already settled is left alone (returns null).
 */
export async function recordFailedDelivery(
  q: Queryable,
  instanceId: string,
  messageId: string,
  error: string,
  maxAttempts: number,
): Promise<{ attempts: number; dead: boolean } | null> {
  const { rows } = await q.query<{ attempts: number; state: string }>(
    `update actor_mailbox
        set attempts = attempts + 1, last_error = $3,
            state = case when attempts + 1 >= $4 then 'dead' else state end,
            dead_at_ms = case when attempts + 1 >= $4 then app_now_ms() end
      where id = $1 and instance_id = $2 and state = 'pending'
     returning attempts, state`,
    [messageId, instanceId, error.slice(0, 2000), Math.max(1, maxAttempts)],
  );
  const row = rows[0];
  return row ? { attempts: row.attempts, dead: row.state === 'dead' } : null;
}

// Fair and bounded (issue 35). Every branch yields (instance, due time) and the poll takes the
// instances whose oldest due work is oldest. Messages are read in due-time order through
// `actor_mailbox_due` (migrations/0010_baseline_effects.sql), never in instance-id order: a backlog on low ids
// cannot hide a later instance, and not-yet-due delayed messages are not read. Because one
// instance's backlog can still fill that slice, a bounded walk over distinct instances with
// pending messages (one index probe per instance, `actor_mailbox_pending`) adds each
// instance's first due message; due pending effects get the same pair of branches
// (`effects_pending` by run time, a walk of `effects_pending_origin`). Due timers are one
// instance each already. Every branch is bounded by SCAN rows (or walk steps).
const WORK_SCAN = 1000;
/** $1 = instances, $2 = actor types or null, $3 = rows read per branch. Exported for EXPLAIN tests. */
export const INSTANCES_WITH_WORK_SQL = `
with recursive due as (select app_now_ms() as now),
mailbox_walk(id, n) as (
  (select instance_id, 1 from actor_mailbox where state = 'pending' order by instance_id limit 1)
  union all
  (select x.instance_id, w.n + 1 from mailbox_walk w,
     lateral (select m.instance_id from actor_mailbox m
               where m.state = 'pending' and m.instance_id > w.id order by m.instance_id limit 1) x
    where w.n < $3)
),
effects_walk(id, due, n) as (
  (select origin_instance_id, run_at_ms, 1 from effects where status = 'pending'
    order by origin_instance_id, run_at_ms limit 1)
  union all
  (select x.origin_instance_id, x.run_at_ms, w.n + 1 from effects_walk w,
     lateral (select e.origin_instance_id, e.run_at_ms from effects e
               where e.status = 'pending' and e.origin_instance_id > w.id
               order by e.origin_instance_id, e.run_at_ms limit 1) x
    where w.n < $3)
),
work(id, due) as (
  (select m.instance_id, m.available_at_ms from actor_mailbox m
    where m.state = 'pending' and m.available_at_ms <= (select now from due)
    order by m.available_at_ms, m.id limit $3)
  union all
  (select w.id, (select m.available_at_ms from actor_mailbox m
                  where m.instance_id = w.id and m.state = 'pending'
                    and m.available_at_ms <= (select now from due)
                  order by m.id limit 1)
     from mailbox_walk w)
  union all
  (select i.id, i.wake_at_ms from actor_instances i
    where i.wake_at_ms <= (select now from due)
    order by i.wake_at_ms limit $3)
  union all
  (select e.origin_instance_id, e.run_at_ms from effects e
    where e.status = 'pending' and e.run_at_ms <= (select now from due)
    order by e.run_at_ms limit $3)
  union all
  (select w.id, w.due from effects_walk w where w.due <= (select now from due))
)
select w.id from work w join actor_instances i on i.id = w.id
 where w.due is not null and ($2::text[] is null or i.actor_type = any($2::text[]))
 group by w.id
 order by min(w.due), w.id
 limit $1`;

/**
 * Instances with due work (an available pending message, a due timer, or a due pending
 * effect: a delayed one or a retry after its backoff), for polling delivery. With
 * `actorTypes`, only instances of those types: an instance no code can run is skipped (see
 * `unrunnableInstancesWithWork`), so it neither crowds out the others nor fails every pass.
 */
export async function instancesWithWork(
  q: Queryable,
  limit: number,
  opts: { actorTypes?: string[] } = {},
): Promise<string[]> {
  const { rows } = await q.query<{ id: string }>(INSTANCES_WITH_WORK_SQL, [
    limit,
    opts.actorTypes ?? null,
    WORK_SCAN,
  ]);
  return rows.map((r) => r.id);
}

/**
 * Instances with due work whose actor type is not in `actorTypes` (bounded scan), grouped by
 * type: the poll skips them and logs this once per pass instead of failing on each one.
 */
export async function unrunnableInstancesWithWork(
  q: Queryable,
  actorTypes: string[],
): Promise<{ actorType: string; instances: number }[]> {
  const { rows } = await q.query<{ actor_type: string; instances: number }>(
    `with due as (select app_now_ms() as now),
     work as (
       (select m.instance_id as id from actor_mailbox m
         where m.state = 'pending' and m.available_at_ms <= (select now from due) limit $2)
       union
       (select id from actor_instances where wake_at_ms <= (select now from due) limit $2)
       union
       (select origin_instance_id from effects
         where status = 'pending' and run_at_ms <= (select now from due) limit $2))
     select i.actor_type, count(*)::int as instances from work w join actor_instances i on i.id = w.id
      where not (i.actor_type = any($1::text[]))
      group by i.actor_type order by i.actor_type`,
    [actorTypes, WORK_SCAN],
  );
  return rows.map((r) => ({ actorType: r.actor_type, instances: r.instances }));
}

/** Deletes delivered and dead messages past retention, one bounded batch of each. */
export async function pruneMailbox(q: Queryable, retentionMs: number, batch = 1000): Promise<number> {
  const res = await q.query(
    `with cutoff as (select app_now_ms() - $1::bigint as at)
     delete from actor_mailbox where id in (
       (select id from actor_mailbox
         where state = 'delivered' and delivered_at_ms < (select at from cutoff) limit $2)
       union all
       (select id from actor_mailbox
         where state = 'dead' and dead_at_ms < (select at from cutoff) limit $2))`,
    [retentionMs, batch],
  );
  return res.rowCount ?? 0;
}
