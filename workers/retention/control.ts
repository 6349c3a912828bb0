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
