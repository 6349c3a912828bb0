import { afterAll, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { registerProcess } from '../../workers/effects/processes';
import { processRecoveryChecks, requestEffectRecovery } from '../../workers/effects/recovery';
import type { EffectHandle } from '../../workers/effects/types';
import { testPool } from '../helpers/db';
import { ageHeartbeat, bindingRow, claimOf, config, effectRow, emit, messages, newInstance } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

const RECOVERY = { recovery: { operation: 'replace' } };
const STATUS = { status: { operation: 'probe' } };

describe('spec: "The terminal transition and effect:<id>:recovery mailbox insertion are atomic … after recovery"', () => {
  it('one batch of one instance moves every stale effect its own way and enqueues recovery and failure messages by effect id, then the responses by request', async () => {
    const inst = await newInstance(pool, 'batch-write');
    const [retireA, retireB, dead, pending, graced] = (await emit(pool, inst, [
      { opts: RECOVERY },
      { opts: RECOVERY },
      { opts: { ...STATUS, maxAttempts: 1 } }, // its one attempt is in flight: dead
      { opts: { ...STATUS, maxAttempts: 3 } }, // attempts left: back to pending
      { opts: { recovery: { operation: 'replace', timeoutMs: 3_600_000 } } }, // its own grace: deferred
    ])) as EffectHandle[];
    const owner = await registerProcess(pool, 'batch-write');
    expect(await claimOf(pool, owner, inst)).toHaveLength(5);
    await ageHeartbeat(pool, owner, 10 * 60_000);
    // Requests in reverse order of effect id, and a second one on retireA.
    const all = [retireA!, retireB!, dead!, pending!, graced!];
    const byId = [...all].sort((x, y) => (x.effectId < y.effectId ? -1 : 1));
    const requests = await withTx(pool, { budgetMs: 5000 }, async (tx) => {
      const out: { h: EffectHandle; id: string }[] = [];
      for (const h of [...[...byId].reverse(), retireA!])
        out.push({ h, id: (await requestEffectRecovery(tx, inst, h)).requestId });
      return out;
    });

    const outcomes = await processRecoveryChecks(pool, inst, config);

    const keys = (await messages(pool, inst)).map((m) => m.message_key);
    const callbacks = byId.flatMap((h) =>
      h === dead
        ? [`effect:${h.effectId}:failed`]
        : h === retireA || h === retireB
          ? [`effect:${h.effectId}:recovery`]
          : [],
    );
    expect(keys).toEqual([...callbacks, ...requests.map((r) => `effect:${r.h.effectId}:check:${r.id}`)]);

    const retiredAtMs = Number((await bindingRow(pool, retireA!.effectId))!.retired_at_ms);
    const expected = (h: EffectHandle, again: boolean) =>
      h === retireA || h === retireB
        ? { outcome: again ? 'already_retired' : 'retired', retiredAtMs }
        : h === dead
          ? { outcome: 'dead', error: 'owner stale after last attempt' }
          : h === pending
            ? { outcome: 'pending' }
            : { outcome: 'deferred', ownerId: owner };
    for (const [i, r] of requests.entries()) expect(outcomes.get(r.id)).toEqual(expected(r.h, i === 5));

    for (const h of [retireA!, retireB!]) {
      expect(await effectRow(pool, h.effectId)).toMatchObject({
        status: 'completed',
        locked_by: null,
        locked_at_ms: null,
        finished_at_ms: String(retiredAtMs),
        result: null,
        last_error: null,
      });
      expect((await bindingRow(pool, h.effectId))!.retired_at_ms).toBe(String(retiredAtMs));
    }
    expect(await effectRow(pool, dead!.effectId)).toMatchObject({
      status: 'dead',
      locked_by: null,
      locked_at_ms: null,
      finished_at_ms: String(retiredAtMs),
      last_error: 'owner stale after last attempt',
    });
    expect(await effectRow(pool, pending!.effectId)).toMatchObject({
      status: 'pending',
      locked_by: null,
      locked_at_ms: null,
      run_at_ms: String(retiredAtMs),
      finished_at_ms: null,
      last_error: null,
      attempts: 1,
    });
    expect(await effectRow(pool, graced!.effectId)).toMatchObject({ status: 'processing', locked_by: owner });
    for (const h of [dead!, pending!, graced!])
      expect((await bindingRow(pool, h.effectId))!.retired_at_ms).toBeNull();
  });
});
