import type { Pool } from '@neondatabase/serverless';
import { expect } from 'vitest';
import { withTx } from '../../workers/db/tx';
import {
  processRecoveryChecks,
  requestEffectRecovery,
  runRecoveryPass,
} from '../../workers/effects/recovery';
import { completeEffects, failEffects } from '../../workers/effects/scheduler';
import { config, messages, racer } from './helpers';
import { holdRows, type LockedTable, rowOf, waitsOn } from './row-locks';

/**
 * The operations the lock-protocol pair tests race, started on a racer (one connection, known
 * backend pid). Each check-type operation stages its own requests right before it starts, so
 * a batch already waiting never picks up the other operation's requests.
 */
export type Op = 'poll' | 'check' | 'batch' | 'complete' | 'fail';
export const RECOVERY_OPS = ['poll', 'check', 'batch'] as const;
export const WRITE_BACKS = ['complete', 'fail'] as const;
export const isRecovery = (op: Op) => (RECOVERY_OPS as readonly Op[]).includes(op);

/** `e` is the contended effect; `e2` a second effect of the same instance a batch also checks. */
export interface Scene {
  pool: Pool;
  inst: string;
  owner: string;
  e: string;
  e2?: string;
}

export interface Started {
  done: Promise<unknown>;
  /** Explicit check requests this operation staged: [request id, effect id]. */
  requests: [string, string][];
}

export async function stageCheck(pool: Pool, inst: string, effectId: string): Promise<string> {
  const h = { effectId, instanceId: inst, kind: 'noop' };
  return (await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, inst, h))).requestId;
}

export async function start(op: Op, on: Pool, s: Scene): Promise<Started> {
  switch (op) {
    case 'poll':
      return { done: runRecoveryPass(on, config), requests: [] };
    case 'check':
    case 'batch': {
      const effects = op === 'check' ? [s.e] : [s.e, s.e2!];
      const requests: [string, string][] = [];
      for (const id of effects) requests.push([await stageCheck(s.pool, s.inst, id), id]);
      return { done: processRecoveryChecks(on, s.inst, config), requests };
    }
    case 'complete':
      return { done: completeEffects(on, s.owner, [{ id: s.e, result: 'done' }]), requests: [] };
    case 'fail':
      return { done: failEffects(on, s.owner, [{ id: s.e, error: 'boom' }]), requests: [] };
  }
}

/** The stored outcome of a check request, and how many responses its mailbox got. */
export async function answered(pool: Pool, inst: string, [requestId, effectId]: [string, string]) {
  const { rows } = await pool.query<{ outcome: string | null }>(
    'select outcome from effect_recovery_checks where id = $1',
    [requestId],
  );
  const key = `effect:${effectId}:check:${requestId}`;
  const responses = (await messages(pool, inst)).filter((m) => m.message_key === key).length;
  return { outcome: rows[0]?.outcome ?? null, responses };
}

/** How many mailbox messages of `inst` have exactly this key. */
export async function countKey(pool: Pool, inst: string, key: string): Promise<number> {
  return (await messages(pool, inst)).filter((m) => m.message_key === key).length;
}

/** A racer that `cleanup` ends after the test, whatever happened. */
export async function openRacer(cleanup: { end(): Promise<void> }[]) {
  const r = await racer();
  cleanup.push(r.pool);
  return r;
}

/** A row by table and key, as holdRows and rowOf name it. */
export type Row = [LockedTable, string];

/**
 * One side of a pair race: `start` begins it on its racer's connection and returns at once
 * with its pending outcome (`done`, never awaited here); it is then seen blocked on `waitsOn`.
 */
export interface Side<T extends { done: Promise<unknown> }> {
  start: (on: Pool) => Promise<T> | T;
  waitsOn: Row;
}

/**
 * The pair-race scaffolding: a holder owns `held`; `first` starts on a racer of its own and
 * is seen waiting on its row (pg_locks), then `second` likewise; then the holder lets go.
 * Returns both sides' starts, whose `done` the test awaits and judges. A deadlock fails the
 * test (harness); no sleeps.
 */
export async function heldRace<A extends { done: Promise<unknown> }, B extends { done: Promise<unknown> }>(
  scope: { pool: Pool; opened: { end(): Promise<void> }[] },
  held: Row,
  first: Side<A>,
  second: Side<B>,
): Promise<[A, B]> {
  const { pool, opened } = scope;
  const holder = await holdRows(pool, opened, [held]);
  const [r1, r2] = [await openRacer(opened), await openRacer(opened)];
  const a = await first.start(r1.pool);
  expect(await waitsOn(pool, r1.pid)).toBe(await rowOf(pool, ...first.waitsOn));
  const b = await second.start(r2.pool);
  expect(await waitsOn(pool, r2.pid)).toBe(await rowOf(pool, ...second.waitsOn));
  await holder.release();
  return [a, b];
}
