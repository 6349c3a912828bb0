import type { Pool } from '@neondatabase/serverless';
import { afterAll } from 'vitest';
import { newEffectId } from '../../workers/effects/ids';
import { testPool, uid } from '../helpers/db';

/** Direct seeding of channel-engine rows, with ages relative to app_now(). */
export class ChannelSeed {
  readonly installationId = uid('inst');
  readonly workspaceId = uid('ws');
  constructor(private readonly pool: Pool) {}

  /** A conversation and its (idle) actor instance; returns the session id. */
  async conversation(opts: { idleDays?: number; state?: object; wakeAtMs?: number } = {}): Promise<string> {
    const sessionId = uid('session');
    await this.pool.query(
      `insert into channel_conversations (id, installation_id, workspace_id, app_id, chat_id, last_position, created_at, updated_at)
       values ($1, $2, $3, 'cli_app', $4, 10, app_now() - $5 * interval '1 day', app_now() - $5 * interval '1 day')`,
      [sessionId, this.installationId, this.workspaceId, uid('chat'), opts.idleDays ?? 0],
    );
    await this.pool.query(
      `insert into actor_instances (id, actor_type, actor_key, state, wake_at_ms)
       values ($1, 'lark-conversation', $1, $2::jsonb, $3)`,
      [
        sessionId,
        JSON.stringify(opts.state ?? { pending: [], turn: null, turnNo: 3 }),
        opts.wakeAtMs ?? null,
      ],
    );
    return sessionId;
  }

  /** One input; returns its row id. `sessionId` null makes a pre-engine row. */
  async input(sessionId: string | null, position: number, ageDays: number): Promise<string> {
    const { rows } = await this.pool.query<{ id: string }>(
      `insert into lark_inbound_messages
         (installation_id, event_id, message_id, chat_id, chat_type, message_type, content, received_at_ms,
          session_id, position, context_revision, created_at)
       values ($1, $2, $3, 'oc_chat', 'p2p', 'text', '{"text":"hi"}', 0, $4, $5, 1,
               app_now() - $6 * interval '1 day')
       returning id`,
      [this.installationId, uid('ev'), uid('om'), sessionId, sessionId ? position : null, ageDays],
    );
    return rows[0]!.id;
  }

  async messageIdOf(inputId: string): Promise<string> {
    const { rows } = await this.pool.query('select message_id from lark_inbound_messages where id = $1', [
      inputId,
    ]);
    return rows[0].message_id;
  }

  /** A turn covering [first, cutoff]; `settledDays` null leaves it running. */
  async turn(
    sessionId: string,
    turnNo: number,
    first: number,
    cutoff: number,
    settledDays: number | null,
    effectId: string = newEffectId(),
  ): Promise<void> {
    await this.pool.query(
      `insert into channel_turns
         (session_id, turn_no, context_revision, first_position, cutoff_position, input_count,
          anchor_message_id, delivery_key, effect_id, outcome, started_at, settled_at)
       values ($1, $2, 1, $3::bigint, $4::bigint, ($4::int - $3::int + 1), 'om_anchor', $5::text, $5::uuid,
               case when $6::int is null then null else 'delivered' end,
               app_now() - coalesce($6::int + 1, 10) * interval '1 day',
               case when $6::int is null then null else app_now() - $6::int * interval '1 day' end)`,
      [sessionId, turnNo, first, cutoff, effectId, settledDays],
    );
  }

  /** A ledger row for an input; `live` leaves it neither cleaned nor abandoned. */
  async ledger(sessionId: string, messageId: string, position: number, live: boolean): Promise<void> {
    await this.pool.query(
      `insert into channel_typing_reaction
         (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
          context_revision, expires_at, cleaned_at, retention_outcome)
       values ($1, $2, $3, 'cli_app', $4, $5, $6, 1, app_now() + interval '7 days',
               case when $7 then null else app_now() end, case when $7 then null else 'cleaned' end)`,
      [uid('ctr'), this.workspaceId, this.installationId, sessionId, messageId, position, live],
    );
  }

  async settlement(sessionId: string, cutoff: number): Promise<void> {
    await this.pool.query(
      `insert into channel_typing_settlement (session_id, context_revision, cutoff_position, settled_by, outcome, taskless)
       values ($1, 1, $2, 'test', 'delivered', false)`,
      [sessionId, cutoff],
    );
  }

  async mailbox(sessionId: string, key: string, state: 'pending' | 'delivered'): Promise<void> {
    await this.pool.query(
      `insert into actor_mailbox (instance_id, message_key, state, delivered_at_ms)
       values ($1, $2, $3, case when $3 = 'delivered' then app_now_ms() end)`,
      [sessionId, key, state],
    );
  }

  async effect(sessionId: string, status: 'pending' | 'completed', id: string = newEffectId()) {
    await this.pool.query(
      `insert into effects (id, origin_instance_id, kind, status, finished_at_ms)
       values ($1, $2, 'channel.reply', $3, case when $3 = 'completed' then app_now_ms() end)`,
      [id, sessionId, status],
    );
    return id;
  }
}

export async function existing(pool: Pool, table: string, column: string, ids: string[]): Promise<string[]> {
  const { rows } = await pool.query(
    `select ${column}::text as id from ${table} where ${column}::text = any($1::text[])`,
    [ids],
  );
  return rows.map((r) => r.id).sort();
}

/** A test file's pool, ended after the file, and a factory for seeds on it. */
export function channelSeeds(): { pool: Pool; newSeed: () => ChannelSeed } {
  const pool = testPool();
  afterAll(() => pool.end());
  return { pool, newSeed: () => new ChannelSeed(pool) };
}
