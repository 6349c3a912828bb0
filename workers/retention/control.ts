import type { PoolClient } from '@neondatabase/serverless';

type Q = Pick<PoolClient, 'query'>;

/**
 * The cleanup's control row in Postgres (migrations/0060_baseline_retention.sql): the database half of the enabled
 * flag and stop generation. The Durable Object answers fast from its own storage; this row is
 * what makes an enable racing a stop, and a batch outliving the object's memory, harmless.
 */
export interface Control {
  generation: number;
  enabled: boolean;
}

interface Row {
  generation: string;
  enabled: boolean;
}

const toControl = (r: Row): Control => ({ generation: Number(r.generation), enabled: r.enabled });

export async function readControl(q: Q): Promise<Control> {
  const { rows } = await q.query<Row>('select generation, enabled from private.retention_control');
  if (!rows[0]) throw new Error('retention_control row is missing (migration 0060 not applied?)');
  return toControl(rows[0]);
}

/**
 * Enable as a compare-and-set: only when the generation is still the one the operator read.
 * A stop committed in between moved it; then nothing changes and the answer is null.
 */
export async function enableAtGeneration(q: Q, generation: number): Promise<Control | null> {
  const { rows } = await q.query<Row>(
    `update private.retention_control set enabled = true, changed_at = app_now()
     where generation = $1 returning generation, enabled`,
    [generation],
  );
  return rows[0] ? toControl(rows[0]) : null;
}

/**
 * The stop fence: a new generation (at least `atLeast`, the object's acknowledged one) and
 * disabled. The UPDATE waits for every batch that holds the row FOR SHARE, so once this
 * commits no batch can commit after it.
 */
export async function fenceStop(q: Q, atLeast: number): Promise<Control> {
  const { rows } = await q.query<Row>(
    `update private.retention_control
     set generation = greatest(generation + 1, $1::bigint), enabled = false, changed_at = app_now()
     returning generation, enabled`,
    [atLeast],
  );
  return toControl(rows[0]!);
}

/**
 * First statement of every batch transaction: holds the control row FOR SHARE until the
 * batch commits, and answers whether `generation` is still the enabled one. A stop's fence
 * (an UPDATE of this row) therefore waits for the batch, and a batch that starts after the
 * fence reads the new generation and deletes nothing. The transaction's idle timeout is set
 * to `idleTimeoutMs` so a batch whose Worker vanished between statements (an object reset)
 * releases the row within that bound instead of the pool's session default.
 */
export async function holdForBatch(q: Q, generation: number, idleTimeoutMs: number): Promise<boolean> {
  const { rows } = await q.query(
    `with settings as (select set_config('idle_in_transaction_session_timeout', $2::text, true))
     select 1 from private.retention_control c, settings
     where c.generation = $1 and c.enabled
     for share of c`,
    [generation, String(Math.max(1, Math.floor(idleTimeoutMs)))],
  );
  return rows.length > 0;
}

/** Who asked for a change of the control row (docs/retention.md "Activation and rollback"). */
export interface Actor {
  /** The operator the request names (an email or handle); recorded, not verified. */
  operator: string;
  /** The credential that allowed it: the cleanup's own, or the general admin token (stop only). */
  credential: 'retention_admin' | 'admin';
  /** The main Worker's request ID (cf-ray), to find the request in its logs. */
  requestId: string;
}

export type Action = 'enable' | 'stop' | 'rollback';

export interface Activation {
  action: Action;
  operator: string;
  credential: Actor['credential'];
  generation: number;
  at: string;
}

/** How long activation records are kept (docs/retention-rules.md). */
export const ACTIVATION_RETENTION_DAYS = 400;
/** At most this many expired records are deleted by one recorded action. */
const ACTIVATION_PRUNE_ROWS = 100;

/**
 * Records an enable, stop or rollback in the transaction that changed the control row, and
 * prunes records past their retention in the same statement.
 */
export async function recordActivation(
  q: Q,
  action: Action,
  actor: Actor,
  generation: number,
): Promise<void> {
  await q.query(
    `with expired as (
       delete from private.retention_activations where id in (
         select id from private.retention_activations
         where at < app_now() - $6::int * interval '1 day'
         order by at limit $7)
     )
     insert into private.retention_activations (action, operator, credential, generation, request_id)
     values ($1, $2, $3, $4, $5)`,
    [
      action,
      actor.operator,
      actor.credential,
      generation,
      actor.requestId,
      ACTIVATION_RETENTION_DAYS,
      ACTIVATION_PRUNE_ROWS,
    ],
  );
}

/** The latest records, newest first. */
export async function readActivations(q: Q, limit: number): Promise<Activation[]> {
  const { rows } = await q.query<{
    action: Action;
    operator: string;
    credential: Actor['credential'];
    generation: string;
    at: Date;
  }>(
    `select action, operator, credential, generation, at from private.retention_activations
     order by id desc limit $1`,
    [limit],
  );
  return rows.map((r) => ({ ...r, generation: Number(r.generation), at: new Date(r.at).toISOString() }));
}
