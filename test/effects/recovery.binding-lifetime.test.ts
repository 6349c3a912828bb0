import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { pruneEffectRows } from '../../workers/effects/cron';
import { EffectStage, MAX_EFFECT_DELAY_MS } from '../../workers/effects/emit';
import { registerProcess, stopProcess } from '../../workers/effects/processes';
import { runRecoveryPass } from '../../workers/effects/recovery';
import { DEFAULT_EFFECT_CONFIG } from '../../workers/effects/types';
import { AppError } from '../../workers/errors';
import { advanceDbClock, setDbClockOffset, testPool } from '../helpers/db';
import { bindingRow, claimOf, effectRow, emit, messages, newInstance } from './helpers';

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
// The runtime's own defaults: a binding lives 7 days, the liveness floor is 30 s.
const config = DEFAULT_EFFECT_CONFIG;

describe('spec: a binding outlives its effect ("polling revisits stopped owners until each effect\'s own grace expires")', () => {
  it('a 7-day effect claimed an hour in, owner stopped: retention keeps the binding past emit + 7 days; retired once its grace passes, one recovery message', async () => {
    const inst = await newInstance(pool, 'lifetime');
    const [h] = await emit(pool, inst, [
      { opts: { recovery: { operation: 'replace', timeoutMs: 7 * DAY } } },
    ]);
    await advanceDbClock(pool, HOUR);
    const owner = await registerProcess(pool, 'lifetime');
    expect((await claimOf(pool, owner, inst)).map((c) => c.id)).toEqual([h!.effectId]);
    // Shutdown keeps opted-in claims and the heartbeat evidence (stamped an hour after emit).
    await stopProcess(pool, owner);

    // Past the binding's fixed lifetime (emit + 7 days), but not past the effect's grace
    // (heartbeat + 7 days): retention must keep the binding, the pass must defer.
    await advanceDbClock(pool, 7 * DAY - HOUR + 60_000);
    await pruneEffectRows(pool, config);
    expect(await bindingRow(pool, h!.effectId)).toMatchObject({ retired_at_ms: null });
    await runRecoveryPass(pool, config);
    expect(await effectRow(pool, h!.effectId)).toMatchObject({ status: 'processing', locked_by: owner });

    // Past the grace: retired (not requeued as an ordinary effect), exactly one message.
    await advanceDbClock(pool, HOUR);
    await pruneEffectRows(pool, config);
    await runRecoveryPass(pool, config);
    expect(await effectRow(pool, h!.effectId)).toMatchObject({ status: 'completed', locked_by: null });
    expect((await bindingRow(pool, h!.effectId))?.retired_at_ms).not.toBeNull();
    await runRecoveryPass(pool, config);
    const recovery = (await messages(pool, inst)).filter(
      (m) => m.message_key === `effect:${h!.effectId}:recovery`,
    );
    expect(recovery).toHaveLength(1);
  });

  it('a binding whose effect finished keeps its full lifetime past the end, so checks can still report it', async () => {
    const inst = await newInstance(pool, 'lifetime');
    const [h] = await emit(pool, inst, [
      { opts: { recovery: { operation: 'replace', timeoutMs: 7 * DAY } } },
    ]);
    const owner = await registerProcess(pool, 'lifetime');
    await claimOf(pool, owner, inst);
    await stopProcess(pool, owner);
    await advanceDbClock(pool, 7 * DAY + HOUR);
    await runRecoveryPass(pool, config);
    expect((await bindingRow(pool, h!.effectId))?.retired_at_ms).not.toBeNull();
    // Retired just now: a week of lifetime from here, whatever the emit time says.
    await advanceDbClock(pool, 6 * DAY);
    await pruneEffectRows(pool, config);
    expect(await bindingRow(pool, h!.effectId)).toBeDefined();
    await advanceDbClock(pool, DAY + HOUR);
    await pruneEffectRows(pool, config);
    expect(await bindingRow(pool, h!.effectId)).toBeUndefined();
  });

  it('delayMs is bounded: an effect cannot wait longer than a binding lives', () => {
    const stage = new EffectStage('any');
    expect(() => stage.emit('noop', {}, { delayMs: MAX_EFFECT_DELAY_MS + 1 })).toThrow(AppError);
    expect(() => stage.emit('noop', {}, { delayMs: MAX_EFFECT_DELAY_MS })).not.toThrow();
    expect(MAX_EFFECT_DELAY_MS).toBeLessThanOrEqual(config.bindingRetentionMs);
  });
});
