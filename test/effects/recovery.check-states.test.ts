import { describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { registerProcess } from '../../workers/effects/processes';
import { processRecoveryChecks, requestEffectRecovery } from '../../workers/effects/recovery';
import { completeEffects, failEffects } from '../../workers/effects/scheduler';
import type { EffectHandle } from '../../workers/effects/types';
import { blockedBehind } from '../helpers/db';
import { ageHeartbeat, claimOf, config, emit, messages, newInstance, raceScope } from './helpers';
import { openRacer } from './pairs';
import { holdRows } from './row-locks';

const { pool, opened } = raceScope();

const RECOVERY = { recovery: { operation: 'replace' } };

async function request(inst: string, h: EffectHandle): Promise<string> {
  return (await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, inst, h))).requestId;
}

/** One check, one batch: its outcome and the instance's runtime messages in mailbox order. */
async function checkOnce(inst: string, h: EffectHandle) {
  const requestId = await request(inst, h);
  const outcome = (await processRecoveryChecks(pool, inst, config)).get(requestId);
  const keys = (await messages(pool, inst)).map((m) => m.message_key).filter((k) => k.startsWith('effect:'));
  return { requestId, outcome, keys };
}

const recoveryKey = (h: EffectHandle) => `effect:${h.effectId}:recovery`;
const checkKey = (h: EffectHandle, requestId: string) => `effect:${h.effectId}:check:${requestId}`;

/** An opted-in effect claimed by a fresh process. */
async function claimed() {
  const inst = await newInstance(pool, 'check-states');
  const [h] = await emit(pool, inst, [{ opts: RECOVERY }]);
  const owner = await registerProcess(pool, 'check-states');
  await claimOf(pool, owner, inst);
  return { inst, h: h!, owner };
}

describe('spec: every state a check can meet gets one response, recovery message before it', () => {
  it('pending (never claimed): pending, nothing retired', async () => {
    const inst = await newInstance(pool, 'check-states');
    const [h] = await emit(pool, inst, [{ opts: RECOVERY }]);
    const r = await checkOnce(inst, h!);
    expect(r.outcome).toMatchObject({ outcome: 'pending' });
    expect(r.keys).toEqual([checkKey(h!, r.requestId)]);
  });

  it('pending retry (failed once, waiting out its backoff): pending', async () => {
    const { inst, h, owner } = await claimed();
    expect((await failEffects(pool, owner, [{ id: h.effectId, error: 'x' }])).accepted).toEqual([h.effectId]);
    const r = await checkOnce(inst, h);
    expect(r.outcome).toMatchObject({ outcome: 'pending' });
    expect(r.keys).toEqual([checkKey(h, r.requestId)]);
  });

  it('processing with a fresh owner: deferred, the claim stays', async () => {
    const { inst, h, owner } = await claimed();
    const r = await checkOnce(inst, h);
    expect(r.outcome).toMatchObject({ outcome: 'deferred', ownerId: owner });
    expect(r.keys).toEqual([checkKey(h, r.requestId)]);
  });

  it('processing, owner heartbeat refreshed while the check waited on its lock: decided on the locked heartbeat (deferred)', async () => {
    const { inst, h, owner } = await claimed();
    await ageHeartbeat(pool, owner, 10 * 60_000); // stale when the check starts
    const requestId = await request(inst, h);
    // The owner is mid-heartbeat: its row is locked while the check runs.
    const beat = await holdRows(pool, opened, [['effect_processes', owner]]);
    const r = await openRacer(opened);
    const batch = processRecoveryChecks(r.pool, inst, config);
    expect(await blockedBehind(pool, beat.pid)).toBe(r.pid);
    await beat.client.query('update effect_processes set heartbeat_at_ms = app_now_ms() where id = $1', [
      owner,
    ]);
    await beat.release();
    expect((await batch).get(requestId)).toMatchObject({ outcome: 'deferred', ownerId: owner });
  });

  it('processing with a stale owner: retired, recovery message then the response', async () => {
    const { inst, h, owner } = await claimed();
    await ageHeartbeat(pool, owner, 10 * 60_000);
    const r = await checkOnce(inst, h);
    expect(r.outcome).toMatchObject({ outcome: 'retired' });
    expect(r.keys).toEqual([recoveryKey(h), checkKey(h, r.requestId)]);
  });

  it('processing with a missing owner (its row is gone): retired', async () => {
    const { inst, h, owner } = await claimed();
    await pool.query('delete from effect_processes where id = $1', [owner]);
    const r = await checkOnce(inst, h);
    expect(r.outcome).toMatchObject({ outcome: 'retired' });
    expect(r.keys).toEqual([recoveryKey(h), checkKey(h, r.requestId)]);
  });

  it('completed: completed with its result', async () => {
    const { inst, h, owner } = await claimed();
    await completeEffects(pool, owner, [{ id: h.effectId, result: { ok: 1 } }]);
    const r = await checkOnce(inst, h);
    expect(r.outcome).toEqual({ outcome: 'completed', result: { ok: 1 } });
    expect(r.keys).toEqual([checkKey(h, r.requestId)]);
  });

  it('failed for good (dead): dead with its error', async () => {
    const inst = await newInstance(pool, 'check-states');
    const [h] = await emit(pool, inst, [{ opts: { ...RECOVERY, maxAttempts: 1 } }]);
    const owner = await registerProcess(pool, 'check-states');
    await claimOf(pool, owner, inst);
    await failEffects(pool, owner, [{ id: h!.effectId, error: 'boom' }]);
    const r = await checkOnce(inst, h!);
    expect(r.outcome).toEqual({ outcome: 'dead', error: 'boom' });
    // The failure callback came first; this check adds only its response.
    expect(r.keys).toEqual([`effect:${h!.effectId}:failed`, checkKey(h!, r.requestId)]);
  });

  it('retired, then checked again: already_retired, no second recovery message', async () => {
    const { inst, h, owner } = await claimed();
    await ageHeartbeat(pool, owner, 10 * 60_000);
    const first = await checkOnce(inst, h);
    const second = await checkOnce(inst, h);
    expect(first.outcome).toMatchObject({ outcome: 'retired' });
    expect(second.outcome).toMatchObject({ outcome: 'already_retired' });
    expect(second.keys).toEqual([
      recoveryKey(h),
      checkKey(h, first.requestId),
      checkKey(h, second.requestId),
    ]);
  });

  it('two concurrent batches on one stale effect: one retires, the other answers already_retired', async () => {
    const { inst, h, owner } = await claimed();
    await ageHeartbeat(pool, owner, 10 * 60_000);
    const a = await request(inst, h);
    // Batch 1 has read check A and holds the instance; it waits on the effect row.
    const holder = await holdRows(pool, opened, [['effects', h.effectId]]);
    const [r1, r2] = [await openRacer(opened), await openRacer(opened)];
    const batch1 = processRecoveryChecks(r1.pool, inst, config);
    expect(await blockedBehind(pool, holder.pid)).toBe(r1.pid);
    // Check B arrives now; batch 2 queues behind batch 1 on the instance.
    const b = await request(inst, h);
    const batch2 = processRecoveryChecks(r2.pool, inst, config);
    expect(await blockedBehind(pool, r1.pid)).toBe(r2.pid);
    await holder.release();
    expect((await batch1).get(a)).toMatchObject({ outcome: 'retired' });
    expect((await batch2).get(b)).toMatchObject({ outcome: 'already_retired' });
    const keys = (await messages(pool, inst)).map((m) => m.message_key);
    expect(keys).toEqual([recoveryKey(h), checkKey(h, a), checkKey(h, b)]);
  });
});
