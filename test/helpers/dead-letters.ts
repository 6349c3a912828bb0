import type { Pool } from '@neondatabase/serverless';
import { uid } from './db';

/**
 * `count` dead letters spread over `conversations` conversations of `installation` (SQL, in
 * one statement), dead at the database's now minus `agoMs`, their instances of `actorType` (none
 * is registered by default: a woken host leaves them pending); their ids in id order.
 */
export async function seedDeadLetters(
  pool: Pool,
  installation: string,
  count: number,
  conversations = 4,
  agoMs = 60_000,
  actorType = 'bulk-test',
) {
  const prefix = uid('conv');
  await pool.query(
    `with c as (
       insert into channel_conversations (id, installation_id, workspace_id, app_id, chat_id)
       select $2 || '_' || g, $1, 'ws_bulk', 'cli_bulk', 'oc_' || g from generate_series(1, $3::int) g
       returning id)
     insert into actor_instances (id, actor_type, actor_key) select id, $4, id from c`,
    [installation, prefix, conversations, actorType],
  );
  const { rows } = await pool.query<{ id: string }>(
    `insert into actor_mailbox (instance_id, message_key, payload, state, attempts, last_error, dead_at_ms)
     select $1 || '_' || (1 + g % $2::int), 'in:' || g, '{}'::jsonb, 'dead', 5, 'Error: boom', app_now_ms() - $4::bigint
       from generate_series(1, $3::int) g
     returning id::text`,
    [prefix, conversations, count, agoMs],
  );
  return rows.map((r) => r.id).sort((a, b) => Number(a) - Number(b));
}

export const newInstallationId = () => `li_${crypto.randomUUID().replaceAll('-', '').slice(0, 12)}`;
