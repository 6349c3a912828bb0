import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EnableResult, StopResult } from '../../workers/retention/types';
import { backendPid, testPool } from '../helpers/db';
import {
  ACTOR,
  blockedBehind,
  cleanupWorker,
  closeLegacyContract,
  currentGeneration,
  owner,
} from './helpers';

const pool = testPool();

beforeAll(() => closeLegacyContract(pool));
afterAll(() => pool.end());

describe('enable against a stop', () => {
  it('a stop acknowledged while enable checks its prerequisites wins: the cleanup stays disabled', async () => {
    const before = await owner().status();
    expect(before.enabled).toBe(false);
    const generation = await currentGeneration();
    const holder = await pool.connect();
    let enabling: Promise<EnableResult>;
    let stopped: StopResult;
    try {
      // Enable reads the legacy contract state first; hold that table so it waits there.
      await holder.query('begin');
      await holder.query('lock table private.write_contract_state in access exclusive mode');
      enabling = cleanupWorker().enable({ generation, actor: ACTOR });
      await blockedBehind(pool, await backendPid(holder));

      stopped = await cleanupWorker().stop({ actor: ACTOR });
      expect(stopped.confirmed).toBe(true);
    } finally {
      await holder.query('commit');
      holder.release();
    }
    const refused = await enabling;
    expect((await owner().status()).enabled).toBe(false);
    expect(refused).toMatchObject({
      enabled: false,
      refused: 'generation_changed',
      generation: stopped.stopGeneration,
    });
    expect((await owner().status()).control).toEqual({ generation: stopped.stopGeneration, enabled: false });

    // A new, explicit enable with the generation read after the stop goes through.
    const again = await cleanupWorker().enable({ generation: await currentGeneration(), actor: ACTOR });
    expect(again.enabled).toBe(true);
    expect(await owner().status()).toMatchObject({
      enabled: true,
      control: { generation: stopped.stopGeneration, enabled: true },
    });
  });

  it('an enable carrying a generation read before a stop is refused and changes nothing', async () => {
    const stale = await currentGeneration();
    const stopped = await cleanupWorker().stop({ actor: ACTOR });
    expect(stopped.confirmed).toBe(true);
    expect(stopped.stopGeneration).toBeGreaterThan(stale);
    const res = await cleanupWorker().enable({ generation: stale, actor: ACTOR });
    expect(res).toMatchObject({
      enabled: false,
      refused: 'generation_changed',
      generation: stopped.stopGeneration,
    });
    expect(await owner().status()).toMatchObject({
      enabled: false,
      control: { generation: stopped.stopGeneration, enabled: false },
    });
  });
});
