import type { PoolClient } from '@neondatabase/serverless';

type Q = Pick<PoolClient, 'query'>;

/**
 * The cleanup's control row in Postgres (migration 0087): the database half of the enabled
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
  if (!rows[0]) throw new Error('retention_control row is missing (migration 0087 not applied?)');
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
