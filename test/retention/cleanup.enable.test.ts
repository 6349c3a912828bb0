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

  it('an enable after a stop was acknowledged but before its database fence committed is refused, and writes nothing', async () => {
    const generation = await currentGeneration();
    const controlBefore = (await owner().status()).control;
    const holder = await pool.connect();
    let stopped: StopResult;
    let refused: EnableResult;
    try {
      // The fence cannot take the control row: the stop is acknowledged (the object's stop
      // generation moved on, execution off) and its fence waits, here until its budget ends.
      await holder.query('begin');
      await holder.query('lock table private.retention_control in access exclusive mode');
      const stopping = cleanupWorker().stop({ actor: ACTOR });
      await blockedBehind(pool, await backendPid(holder));
      // An enable with the database's generation, which the fence has not moved yet.
      refused = await cleanupWorker().enable({ generation, actor: ACTOR });
      stopped = await stopping;
    } finally {
      await holder.query('commit');
      holder.release();
    }
    // The fence is free again but the stop was never confirmed: enabling is still refused.
    const after = await cleanupWorker().enable({ generation, actor: ACTOR });
    expect(after).toMatchObject({ enabled: false, refused: 'generation_changed' });
    expect(stopped.confirmed).toBe(false);
    expect(refused).toMatchObject({
      enabled: false,
      refused: 'generation_changed',
      generation: stopped.stopGeneration,
    });
    expect(stopped.stopGeneration).toBeGreaterThan(generation);
    // Nothing was written: the database row is as the (unconfirmed) stop found it.
    expect(await owner().status()).toMatchObject({ enabled: false, control: controlBefore });
    // The acknowledged stop must be confirmed first: a new stop does; then the generation it
    // shows enables.
    const again = await cleanupWorker().stop({ actor: ACTOR });
    expect(again.confirmed).toBe(true);
    const enabled = await cleanupWorker().enable({ generation: await currentGeneration(), actor: ACTOR });
    expect(enabled.enabled).toBe(true);
    await cleanupWorker().stop({ actor: ACTOR });
  }, 30_000);

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
