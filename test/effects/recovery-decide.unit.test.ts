import { describe, expect, it } from 'vitest';
import {
  answerChecks,
  decideEffect,
  type LockedEffect,
  type OwnerSeen,
  type RecoveryOutcome,
} from '../../workers/effects/recovery-decide';
import type { RecoveryBindingRow } from '../../workers/effects/types';

/**
 * The per-effect recovery decision as a pure function (issue 32 item 6; issue 35's proofs on
 * the floor and the cutoff): what `decideRecovery` concludes from what its locks returned,
 * without a database. The locking, the order and the one write statement are tested through
 * the database in recovery.*.test.ts.
 */
const NOW = 1_000_000;
const FLOOR = 30_000;
const rule = { staleAfterMs: FLOOR, takeover: new Set(['idem.kind']) };

const effect = (over: Partial<LockedEffect> = {}): LockedEffect => ({
  id: '0190a000-0000-7000-8000-000000000001',
  kind: 'plain.kind',
  status: 'processing',
  locked_by: '42',
  attempts: 1,
  max_attempts: 3,
  result: null,
  last_error: null,
  ...over,
});

const binding = (over: Partial<RecoveryBindingRow> = {}): RecoveryBindingRow => ({
  effect_id: effect().id,
  origin_instance_id: 'i',
  recovery_operation: 'settle',
  status_operation: null,
  timeout_ms: null,
  retired_at_ms: null,
  expires_at_ms: String(NOW + 86_400_000),
  ...over,
});

const fresh: OwnerSeen = { heartbeatMs: NOW - 1000, superseded: false };
const beatAt = (ms: number): OwnerSeen => ({ heartbeatMs: ms, superseded: false });

describe('decideEffect', () => {
  it('recovery.floor_wins: the runtime floor wins over a shorter per-effect timeout', () => {
    const d = decideEffect(effect(), binding({ timeout_ms: '5000' }), beatAt(NOW - 10_000), NOW, rule);
    expect(d.out).toEqual({ outcome: 'deferred', ownerId: '42' });
    expect(d.transition).toBeUndefined();
  });

  it('recovery.longer_timeout_wins: a per-effect timeout above the floor is the threshold', () => {
    expect(
      decideEffect(effect(), binding({ timeout_ms: '60000' }), beatAt(NOW - 40_000), NOW, rule).out,
    ).toEqual({
      outcome: 'deferred',
      ownerId: '42',
    });
    expect(
      decideEffect(effect(), binding({ timeout_ms: '60000' }), beatAt(NOW - 60_001), NOW, rule).out,
    ).toEqual({
      outcome: 'retired',
      retiredAtMs: NOW,
    });
  });

  it('recovery.cutoff_pinned: a heartbeat exactly at the cutoff is live; one millisecond older is stale', () => {
    expect(decideEffect(effect(), binding(), beatAt(NOW - FLOOR), NOW, rule).out.outcome).toBe('deferred');
    expect(decideEffect(effect(), binding(), beatAt(NOW - FLOOR - 1), NOW, rule).out.outcome).toBe('retired');
  });

  it('recovery.stale_paths: retired with a recovery operation (and its message), else pending, else dead after the last attempt', () => {
    const gone: OwnerSeen = { heartbeatMs: undefined, superseded: false };
    const retired = decideEffect(effect({ attempts: 2 }), binding(), gone, NOW, rule);
    expect(retired).toEqual({
      out: { outcome: 'retired', retiredAtMs: NOW },
      transition: 'retired',
      message: {
        key: `effect:${effect().id}:recovery`,
        payload: {
          effectId: effect().id,
          kind: 'plain.kind',
          operation: 'settle',
          retiredAtMs: NOW,
          attempts: 2,
        },
      },
    });
    expect(decideEffect(effect(), undefined, gone, NOW, rule)).toEqual({
      out: { outcome: 'pending' },
      transition: 'pending',
    });
    const dead = decideEffect(
      effect({ attempts: 3 }),
      binding({ recovery_operation: null }),
      gone,
      NOW,
      rule,
    );
    expect(dead.out).toEqual({ outcome: 'dead', error: 'owner stale after last attempt' });
    expect(dead.transition).toBe('dead');
    expect(dead.message?.key).toBe(`effect:${effect().id}:failed`);
  });

  it('recovery.superseded_owner: taken over at once only for a kind idempotent by key', () => {
    const superseded: OwnerSeen = { heartbeatMs: NOW - 10, superseded: true };
    expect(decideEffect(effect({ kind: 'idem.kind' }), binding(), superseded, NOW, rule).out.outcome).toBe(
      'retired',
    );
    expect(decideEffect(effect(), binding(), superseded, NOW, rule).out.outcome).toBe('deferred');
  });

  it('recovery.terminal_states: a retired binding, a missing effect and finished effects write nothing', () => {
    const gone: OwnerSeen = { heartbeatMs: undefined, superseded: false };
    expect(decideEffect(effect(), binding({ retired_at_ms: '5' }), gone, NOW, rule)).toEqual({
      out: { outcome: 'already_retired', retiredAtMs: 5 },
    });
    expect(decideEffect(undefined, undefined, gone, NOW, rule)).toEqual({ out: { outcome: 'missing' } });
    expect(
      decideEffect(effect({ status: 'completed', result: { ok: 1 } }), binding(), gone, NOW, rule),
    ).toEqual({
      out: { outcome: 'completed', result: { ok: 1 } },
    });
    expect(decideEffect(effect({ status: 'dead', last_error: 'x' }), binding(), gone, NOW, rule)).toEqual({
      out: { outcome: 'dead', error: 'x' },
    });
    expect(decideEffect(effect({ status: 'pending' }), binding(), fresh, NOW, rule)).toEqual({
      out: { outcome: 'pending' },
    });
  });
});

describe('answerChecks', () => {
  it('recovery.check_answers: numeric request order, the first check of a retirement wins, unbound checks expire', () => {
    const outcomes = new Map<string, RecoveryOutcome>([
      ['e1', { outcome: 'retired', retiredAtMs: NOW }],
      ['e2', { outcome: 'deferred', ownerId: '42' }],
    ]);
    const { checkOutcomes, messages } = answerChecks(
      [
        { requestId: '10', effectId: 'e1' },
        { requestId: '9', effectId: 'e1' },
        { requestId: '11', effectId: 'e2' },
        { requestId: '12', effectId: 'e3' },
      ],
      new Set(['e1', 'e2']),
      outcomes,
    );
    expect(Object.fromEntries(checkOutcomes)).toEqual({
      '9': { outcome: 'retired', retiredAtMs: NOW },
      '10': { outcome: 'already_retired', retiredAtMs: NOW },
      '11': { outcome: 'deferred', ownerId: '42' },
      '12': { outcome: 'expired' },
    });
    expect(messages.map((m) => m.key)).toEqual([
      'effect:e1:check:9',
      'effect:e1:check:10',
      'effect:e2:check:11',
      'effect:e3:check:12',
    ]);
  });
});
