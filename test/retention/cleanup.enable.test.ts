import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendPid, testPool } from '../helpers/db';
import { admin, blockedBehind, closeLegacyContract, currentGeneration, owner } from './helpers';

const pool = testPool();

beforeAll(() => closeLegacyContract());
afterAll(() => pool.end());

describe('enable against a stop', () => {
  it('a stop acknowledged while enable checks its prerequisites wins: the cleanup stays disabled', async () => {
    const before = await owner().status();
    expect(before.enabled).toBe(false);
    const generation = await currentGeneration();
    const holder = await pool.connect();
    let enabling: ReturnType<typeof admin>;
    let stopped: Awaited<ReturnType<typeof admin>>;
    try {
      // Enable reads the legacy contract state first; hold that table so it waits there.
      await holder.query('begin');
      await holder.query('lock table private.write_contract_state in access exclusive mode');
      enabling = admin('POST', '/admin/retention/enable', { generation });
      await blockedBehind(pool, await backendPid(holder));

      stopped = await admin('POST', '/admin/retention/stop');
      expect(stopped.status).toBe(200);
    } finally {
      await holder.query('commit');
      holder.release();
    }
    const refused = await enabling;
    expect((await owner().status()).enabled).toBe(false);
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({
      code: 'conflict',
      details: { reason: 'generation_changed', generation: stopped.body.stopGeneration },
    });
    expect((await owner().status()).control).toEqual({
      generation: stopped.body.stopGeneration,
      enabled: false,
    });

    // A new, explicit enable with the generation read after the stop goes through.
    const again = await admin('POST', '/admin/retention/enable', { generation: await currentGeneration() });
    expect(again.status).toBe(200);
    expect(await owner().status()).toMatchObject({
      enabled: true,
      control: { generation: stopped.body.stopGeneration, enabled: true },
    });
  });

  it('an enable carrying a generation read before a stop is refused and changes nothing', async () => {
    const stale = await currentGeneration();
    const stopped = await admin('POST', '/admin/retention/stop');
    expect(stopped.status).toBe(200);
    expect(stopped.body.stopGeneration).toBeGreaterThan(stale);
    const res = await admin('POST', '/admin/retention/enable', { generation: stale });
    expect(res.status).toBe(409);
    expect(res.body.error.details).toEqual({
      reason: 'generation_changed',
      generation: stopped.body.stopGeneration,
    });
    expect(await owner().status()).toMatchObject({
      enabled: false,
      control: { generation: stopped.body.stopGeneration, enabled: false },
    });
  });

  it('an enable without the generation is refused as invalid', async () => {
    const res = await admin('POST', '/admin/retention/enable', {});
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('validation_failed');
    expect((await owner().status()).enabled).toBe(false);
  });
});
