import { afterAll, describe, expect, it } from 'vitest';
import { testPool, uid } from '../helpers/db';
import { changedTables, tableSums } from '../helpers/tables';

/**
 * test/helpers/tables.ts decides "nothing was written" for every refusal test and every fuzz
 * case; it reads row versions, not content, so each kind of write is shown to register here,
 * and a rolled-back one not to.
 */
const pool = testPool(2);
afterAll(() => pool.end());

const WORKSPACES = 'private.workspaces';

async function changedBy(write: () => Promise<unknown>): Promise<string[]> {
  const before = await tableSums(pool);
  await write();
  return changedTables(before, await tableSums(pool));
}

describe('the table snapshot sees every write', () => {
  it('an insert, an update (to a new value and to the same one) and a delete each change the table', async () => {
    const id = uid('ws');
    expect(
      await changedBy(() => pool.query(`insert into private.workspaces (id, name) values ($1, 'a')`, [id])),
    ).toEqual([WORKSPACES]);
    expect(
      await changedBy(() => pool.query(`update private.workspaces set name = 'b' where id = $1`, [id])),
    ).toEqual([WORKSPACES]);
    // Same content, new row version: a write all the same.
    expect(
      await changedBy(() => pool.query(`update private.workspaces set name = name where id = $1`, [id])),
    ).toEqual([WORKSPACES]);
    expect(await changedBy(() => pool.query(`delete from private.workspaces where id = $1`, [id]))).toEqual([
      WORKSPACES,
    ]);
  });

  it('a delete and an insert in one transaction (the count unchanged) change the table', async () => {
    const old = uid('ws');
    await pool.query(`insert into private.workspaces (id) values ($1)`, [old]);
    expect(
      await changedBy(() =>
        pool.query(
          `with gone as (delete from private.workspaces where id = $1)
           insert into private.workspaces (id) values ($2)`,
          [old, uid('ws')],
        ),
      ),
    ).toEqual([WORKSPACES]);
  });

  it('reads, a row lock and a rolled-back insert change nothing', async () => {
    const id = uid('ws');
    await pool.query(`insert into private.workspaces (id) values ($1)`, [id]);
    const client = await pool.connect();
    try {
      expect(
        await changedBy(async () => {
          await client.query('begin');
          await client.query(`select * from private.workspaces where id = $1 for update`, [id]);
          await client.query(`insert into private.workspaces (id) values ($1)`, [uid('ws')]);
          await client.query('rollback');
        }),
      ).toEqual([]);
    } finally {
      client.release();
    }
  });
});
