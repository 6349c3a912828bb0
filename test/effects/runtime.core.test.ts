import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { commitActor } from '../../workers/effects/commit';
import { EffectStage } from '../../workers/effects/emit';
import { enqueueMessage, loadInstance } from '../../workers/effects/mailbox';
import { pruneProcesses, registerProcess, stopProcess } from '../../workers/effects/processes';
import {
  processRecoveryChecks,
  pruneEffects,
  pruneExpiredBindings,
  requestEffectRecovery,
  runRecoveryPass,
  staleCandidates,
} from '../../workers/effects/recovery';
import { completeEffects, failEffects } from '../../workers/effects/scheduler';
import { EFFECT_PROTOCOL_VERSION } from '../../workers/effects/types';
import { setDbClockOffset, testPool } from '../helpers/db';
import { ageHeartbeat, bindingRow, claimOf, config, effectRow, emit, messages, newInstance } from './helpers';

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

describe('fenced actor commit', () => {
  it('a stale revision fails with revision_conflict and writes nothing', async () => {
    const inst = await newInstance(pool);
    const before = await loadInstance(pool, inst);
    await emit(pool, inst, [{}]); // moves the revision
    const stage = new EffectStage(inst);
    const h = stage.emit('noop', {}, { recovery: { operation: 'retry' } });
    await expect(
      withTx(pool, { budgetMs: 5000 }, (tx) =>
        commitActor(
          tx,
          { instanceId: inst, expectedRevision: before!.revision, state: { x: 1 }, effects: stage.staged },
          config,
        ),
      ),
    ).rejects.toMatchObject({ code: 'revision_conflict' });
    expect(await effectRow(pool, h.effectId)).toBeUndefined();
    expect(await bindingRow(pool, h.effectId)).toBeUndefined();
    expect((await loadInstance(pool, inst))!.state).toEqual({});
  });

  it('emit allocates the ID at staging and refuses invalid timeouts', () => {
    const stage = new EffectStage('x:y');
    const h = stage.emit('noop', { a: 1 });
    expect(h).toEqual({ effectId: stage.staged[0]!.id, instanceId: 'x:y', kind: 'noop' });
    expect(JSON.parse(JSON.stringify(h))).toEqual(h);
    for (const timeoutMs of [0, -5, 1.5, 8 * 86_400_000])
      expect(() => stage.emit('noop', {}, { recovery: { operation: 'r', timeoutMs } })).toThrow(/timeoutMs/);
  });

  it('refuses recovery-enabled effects while a live process reports an older protocol', async () => {
    const old = await registerProcess(pool, 'old-worker', EFFECT_PROTOCOL_VERSION - 1);
    const inst = await newInstance(pool);
    await expect(emit(pool, inst, [{ opts: { recovery: { operation: 'r' } } }])).rejects.toMatchObject({
      code: 'precondition_failed',
    });
    await emit(pool, inst, [{}]); // ordinary effects are fine
    await stopProcess(pool, old);
    await emit(pool, inst, [{ opts: { recovery: { operation: 'r' } } }]);
  });
});

describe('mailbox', () => {
  it('is idempotent per key and refuses reserved effect: keys', async () => {
    const inst = await newInstance(pool);
    expect((await enqueueMessage(pool, inst, 'in-1', { a: 1 })).inserted).toBe(true);
    expect((await enqueueMessage(pool, inst, 'in-1', { a: 1 })).inserted).toBe(false);
    // A different payload under the key is the caller's conflict (test/effects/mailbox.conflict).
    await expect(enqueueMessage(pool, inst, 'in-1', { a: 2 })).rejects.toMatchObject({ code: 'conflict' });
    await expect(enqueueMessage(pool, inst, 'effect:x:recovery', {})).rejects.toMatchObject({
      code: 'validation_failed',
    });
    expect((await messages(pool, inst)).map((m) => m.payload)).toEqual([{ a: 1 }]);
  });
});

describe('scheduler', () => {
  it('retries with backoff, then dead with the failure callback', async () => {
    const p = await registerProcess(pool, 'w');
    const inst = await newInstance(pool);
    const [h] = await emit(pool, inst, [{ opts: { maxAttempts: 2 } }]);
    expect((await claimOf(pool, p, inst)).map((e) => e.id)).toEqual([h!.effectId]);
    expect((await failEffects(pool, p, [{ id: h!.effectId, error: 'boom' }])).dead).toEqual([]);
    expect(await claimOf(pool, p, inst)).toEqual([]); // backoff: not due yet
    await setDbClockOffset(pool, 10_000);
    await claimOf(pool, p, inst);
    expect((await failEffects(pool, p, [{ id: h!.effectId, error: 'boom' }])).dead).toEqual([h!.effectId]);
    expect((await effectRow(pool, h!.effectId))!.status).toBe('dead');
    expect((await messages(pool, inst)).map((m) => m.message_key)).toEqual([`effect:${h!.effectId}:failed`]);
  });

  it('an ordinary effect whose owner went stale goes back to pending and is claimed again', async () => {
    const p1 = await registerProcess(pool, 'w');
    const p2 = await registerProcess(pool, 'w');
    const inst = await newInstance(pool);
    const [h] = await emit(pool, inst, [{ opts: { status: { operation: 'probe' } } }]);
    await claimOf(pool, p1, inst);
    await ageHeartbeat(pool, p1, 60_000);
    await runRecoveryPass(pool, config);
    expect((await bindingRow(pool, h!.effectId))!.retired_at_ms).toBeNull(); // status-only: never retired
    expect((await claimOf(pool, p2, inst)).map((e) => e.id)).toEqual([h!.effectId]);
    // The stale owner's late completion is rejected; the new owner's is accepted.
    expect((await completeEffects(pool, p1, [{ id: h!.effectId, result: 'late' }])).rejected).toEqual([
      h!.effectId,
    ]);
    expect((await completeEffects(pool, p2, [{ id: h!.effectId, result: 'ok' }])).accepted).toEqual([
      h!.effectId,
    ]);
    expect(await messages(pool, inst)).toEqual([]);
  });
});

describe('recovery', () => {
  it('retires a stale opted-in effect atomically with its recovery message; late completion is rejected', async () => {
    const p = await registerProcess(pool, 'w');
    const inst = await newInstance(pool);
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'replace' } } }]);
    await claimOf(pool, p, inst);
    await ageHeartbeat(pool, p, 31_000);
    // The wake-up fails: the committed retirement stands and the message is in the mailbox.
    const report = await runRecoveryPass(pool, config, { wake: () => Promise.reject(new Error('down')) });
    expect(report.retired).toBe(1);
    const row = await effectRow(pool, h!.effectId);
    expect(row).toMatchObject({ status: 'completed', locked_by: null, result: null });
    expect((await bindingRow(pool, h!.effectId))!.retired_at_ms).not.toBeNull();
    const msgs = await messages(pool, inst);
    expect(msgs.map((m) => m.message_key)).toEqual([`effect:${h!.effectId}:recovery`]);
    expect(msgs[0]!.payload).toMatchObject({ effectId: h!.effectId, operation: 'replace' });
    expect((await completeEffects(pool, p, [{ id: h!.effectId, result: 'late' }])).accepted).toEqual([]);
    expect((await failEffects(pool, p, [{ id: h!.effectId, error: 'late' }])).accepted).toEqual([]);
  });

  it("a stopped process's effect is recovered only after that effect's own grace", async () => {
    const p = await registerProcess(pool, 'w');
    const inst = await newInstance(pool);
    const [slow, plain] = await emit(pool, inst, [
      { opts: { recovery: { operation: 'r', timeoutMs: 120_000 } } },
      {},
    ]);
    await claimOf(pool, p, inst);
    const { released } = await stopProcess(pool, p);
    expect(released).toBe(1); // the ordinary claim went back at once
    expect((await effectRow(pool, plain!.effectId))!.status).toBe('pending');
    expect((await effectRow(pool, slow!.effectId))!.locked_by).toBe(p); // opted-in claim kept
    await setDbClockOffset(pool, 60_000); // past the runtime floor, inside the effect's grace
    await runRecoveryPass(pool, config);
    expect((await staleCandidates(pool, config)).map((c) => c.id)).not.toContain(slow!.effectId);
    expect(await effectRow(pool, slow!.effectId)).toMatchObject({ status: 'processing', locked_by: p });
    await setDbClockOffset(pool, 125_000);
    await runRecoveryPass(pool, config);
    expect((await bindingRow(pool, slow!.effectId))!.retired_at_ms).not.toBeNull();
  });

  it('pruning keeps processes that still own an effect', async () => {
    const owner = await registerProcess(pool, 'w');
    const idle = await registerProcess(pool, 'w');
    const inst = await newInstance(pool);
    await emit(pool, inst, [{ opts: { recovery: { operation: 'r', timeoutMs: 3 * 86_400_000 } } }]);
    await claimOf(pool, owner, inst);
    await stopProcess(pool, owner);
    await stopProcess(pool, idle);
    await setDbClockOffset(pool, 2 * 86_400_000);
    await pruneProcesses(pool, 86_400_000);
    const { rows } = await pool.query('select id from effect_processes where id = any($1::bigint[])', [
      [owner, idle],
    ]);
    expect(rows.map((r) => r.id)).toEqual([owner]);
  });

  it('a pruned effect checks as already retired or missing within the binding lifetime, and fails outside it', async () => {
    const p = await registerProcess(pool, 'w');
    const inst = await newInstance(pool);
    const [retired, done] = await emit(pool, inst, [
      { opts: { recovery: { operation: 'r' } } },
      { opts: { recovery: { operation: 'r' } } },
    ]);
    await claimOf(pool, p, inst);
    await completeEffects(pool, p, [{ id: done!.effectId, result: 1 }]);
    await ageHeartbeat(pool, p, 31_000);
    await runRecoveryPass(pool, config);
    await setDbClockOffset(pool, 2 * 86_400_000);
    await pool.query('delete from effects where id = any($1::uuid[])', [[retired!.effectId, done!.effectId]]);
    const [r1, r2] = await withTx(pool, { budgetMs: 5000 }, async (tx) => [
      await requestEffectRecovery(tx, retired!.instanceId, retired!),
      await requestEffectRecovery(tx, done!.instanceId, done!),
    ]);
    const out = await processRecoveryChecks(pool, inst, config);
    expect(out.get(r1!.requestId)).toMatchObject({ outcome: 'already_retired' });
    expect(out.get(r2!.requestId)).toEqual({ outcome: 'missing' });
    const keys = (await messages(pool, inst)).map((m) => m.message_key);
    expect(keys).toContain(`effect:${retired!.effectId}:check:${r1!.requestId}`);
    await setDbClockOffset(pool, 8 * 86_400_000);
    await pruneExpiredBindings(pool);
    await expect(
      withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, retired!.instanceId, retired!)),
    ).rejects.toMatchObject({
      code: 'gone',
    });
  });

  it('deleting an instance cascades its bindings; effect pruning keeps them', async () => {
    const inst = await newInstance(pool);
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'r' } } }]);
    await pool.query("update effects set status = 'completed', finished_at_ms = 0 where id = $1", [
      h!.effectId,
    ]);
    await pruneEffects(pool, 1000);
    expect(await effectRow(pool, h!.effectId)).toBeUndefined();
    expect(await bindingRow(pool, h!.effectId)).toBeDefined();
    await pool.query('delete from actor_instances where id = $1', [inst]);
    expect(await bindingRow(pool, h!.effectId)).toBeUndefined();
  });
});
