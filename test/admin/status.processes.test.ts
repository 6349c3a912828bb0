import { env, exports } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { registerProcess, stopProcess } from '../../workers/effects/processes';
import { setDbClockOffset, testPool } from '../helpers/db';

const auth = { authorization: `Bearer ${env.ADMIN_TOKEN}` };
const pool = testPool(2);
const mine: string[] = [];

afterAll(async () => {
  // A process registered under a moved clock would look alive to later files: remove ours.
  await pool.query('delete from effect_processes where id = any($1::bigint[])', [mine]);
  await setDbClockOffset(pool, 0);
  await pool.end();
});

async function processCounts(): Promise<{ live: number; stale: number }> {
  const res = await exports.default.fetch('http://test/admin/status', { headers: auth });
  expect(res.status).toBe(200);
  const { backlog } = (await res.json()) as { backlog: { live_processes: number; stale_processes: number } };
  return { live: backlog.live_processes, stale: backlog.stale_processes };
}

describe('GET /admin/status: processes', () => {
  it('counts as live only processes whose heartbeat is within EFFECT_STALE_AFTER_MS', async () => {
    const staleAfterMs = Number(env.EFFECT_STALE_AFTER_MS ?? 30_000);
    // An hour ahead, every process of earlier files is stale for the whole test, so none of
    // them can cross the threshold between two readings.
    await setDbClockOffset(pool, 3_600_000);
    const silent = await registerProcess(pool, 'status-test');
    const beating = await registerProcess(pool, 'status-test');
    mine.push(silent, beating);
    const fresh = await processCounts();
    expect(fresh.live).toBeGreaterThanOrEqual(2);

    // `silent` last beat just past the floor: still registered, never stopped, not live.
    await pool.query(
      'update effect_processes set heartbeat_at_ms = app_now_ms() - $2::bigint where id = $1',
      [silent, staleAfterMs + 1000],
    );
    const afterSilence = await processCounts();
    expect(afterSilence.live).toBe(fresh.live - 1);
    expect(afterSilence.stale).toBe(fresh.stale + 1);

    // A stopped process is neither live nor stale, whatever its last heartbeat.
    await stopProcess(pool, silent);
    const silentStopped = await processCounts();
    expect(silentStopped).toEqual({ live: afterSilence.live, stale: afterSilence.stale - 1 });
    await stopProcess(pool, beating);
    const bothStopped = await processCounts();
    expect(bothStopped).toEqual({ live: silentStopped.live - 1, stale: silentStopped.stale });
  });
});
