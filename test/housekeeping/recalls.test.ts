import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';
import { DAY_MS, runSteps } from './helpers';

/**
 * `channel_recalled_messages` (migration 0210): the housekeeping's `recalls` step deletes a
 * recall 7 days after it was recorded, and never while an input of its message is left
 * (docs/retention-rules.md).
 */
const pool = testPool(2);
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

async function recallsOf(installationId: string) {
  const { rows } = await pool.query<{ message_id: string }>(
    'select message_id from channel_recalled_messages where installation_id = $1 order by message_id',
    [installationId],
  );
  return rows.map((r) => r.message_id);
}

describe('channel_recalled_messages retention', () => {
  it('recalls.retention: deleted 7 days after recorded, bounded per run; kept while an input of the message is left', async () => {
    const installationId = uid('li');
    await pool.query(
      `insert into channel_recalled_messages (installation_id, message_id, event_id)
       select $1, m, 'ev_' || m from unnest(array['om_a', 'om_b', 'om_c']) m`,
      [installationId],
    );
    // An input of om_c is still there (its own retention deletes it first).
    await pool.query(
      `insert into lark_inbound_messages
         (installation_id, event_id, message_id, chat_id, chat_type, message_type, content, received_at_ms)
       values ($1, 'ev_in', 'om_c', 'oc_x', 'p2p', 'text', '{}', 0)`,
      [installationId],
    );
    const prune = async () => (await runSteps(pool, ['recalls'], { batchRows: 1 })).recalls;
    expect(await prune()).toBe(0);
    await advanceDbClock(pool, 7 * DAY_MS + 1000);
    expect(await prune()).toBe(1);
    expect(await prune()).toBe(1);
    expect(await prune()).toBe(0);
    expect(await recallsOf(installationId)).toEqual(['om_c']);
  });
});
