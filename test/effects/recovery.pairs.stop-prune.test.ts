import type { Pool } from '@neondatabase/serverless';
import { describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import type { EmitOptions } from '../../workers/effects/emit';
import { registerProcess, stopProcess } from '../../workers/effects/processes';
import { processRecoveryChecks, pruneEffects, pruneExpiredBindings } from '../../workers/effects/recovery';
import { claimEffects, completeEffects } from '../../workers/effects/scheduler';
import { setDbClockOffset } from '../helpers/db';
import {
  ageHeartbeat,
  bindingRow,
  claimOf,
  config,
  effectRow,
  emit,
  neverBlocked,
  newInstance,
  raceScope,
} from './helpers';
import {
  answered,
  countKey,
  heldRace,
  type Op,
  openRacer,
  RECOVERY_OPS,
  type Row,
  type Scene,
  stageCheck,
  start,
  WRITE_BACKS,
} from './pairs';
import { type Holder, holdRows, rowOf, waitsOn } from './row-locks';

/**
 * The pairs of recovery-pairs.test.ts for process stop, effect pruning and binding pruning:
 * the first held at a lock, the second's wait named row by row, then released; a deadlock
 * fails the test (harness). Stop runs in one transaction here, the case where it still holds
 * the effects it released while it waits on its process row.
 */
const { pool, opened } = raceScope(12);

const DAY = 86_400_000;
const RECOVERY: EmitOptions = { recovery: { operation: 'replace' } };

function stop(on: Parameters<typeof withTx>[0], processId: string) {
  return withTx(on, { budgetMs: 10_000 }, (tx) => stopProcess(tx, processId));
}

async function stoppedAt(processId: string) {
  const { rows } = await pool.query('select stopped_at_ms from effect_processes where id = $1', [processId]);
  return rows[0]?.stopped_at_ms ?? null;
}

/**
 * A stale owner's claims: `e` has a status-only binding (checkable, never retired, so a stop
 * releases it) and, with `optedIn`, `e2` opts in to retirement (a stop keeps it).
 */
async function stopScene(optedIn: boolean): Promise<Scene> {
  const inst = await newInstance(pool, 'pairs-stop');
  const specs: { opts: EmitOptions }[] = [{ opts: { status: { operation: 'status' } } }];
  if (optedIn) specs.push({ opts: RECOVERY });
  const [e, e2] = await emit(pool, inst, specs);
  const owner = await registerProcess(pool, 'pairs-stop');
  await claimOf(pool, owner, inst);
  await ageHeartbeat(pool, owner, config.staleAfterMs + 1000);
  return { pool, inst, owner, e: e!.effectId, e2: e2?.effectId };
}

describe('spec: "Explicit batches acquire all effect and binding locks before any process locks"; a stop locks the effects it releases, then its process', () => {
  for (const op of RECOVERY_OPS) {
    it(`${op} held on the owner's row, then stop: the stop waits on the effect it would release; ${op} requeues it, the stop releases nothing`, async () => {
      const s = await stopScene(op === 'batch');
      const [a, stopped] = await heldRace(
        { pool, opened },
        ['effect_processes', s.owner],
        { start: (on) => start(op, on, s), waitsOn: ['effect_processes', s.owner] },
        { start: (on) => ({ done: stop(on, s.owner) }), waitsOn: ['effects', s.e] },
      );
      await a.done;
      expect((await stopped.done).released).toBe(0);
      expect(await effectRow(pool, s.e)).toMatchObject({ status: 'pending', locked_by: null, attempts: 1 });
      for (const req of a.requests)
        expect((await answered(pool, s.inst, req)).outcome).toBe(req[1] === s.e ? 'pending' : 'retired');
      expect(await stoppedAt(s.owner)).not.toBeNull();
    });

    it(`stop held on its process row, then ${op}: it waits on the effect the stop released; the stop wins, ${op} changes nothing`, async () => {
      const s = await stopScene(op === 'batch');
      const [stopped, a] = await heldRace(
        { pool, opened },
        ['effect_processes', s.owner],
        { start: (on) => ({ done: stop(on, s.owner) }), waitsOn: ['effect_processes', s.owner] },
        { start: (on) => start(op, on, s), waitsOn: ['effects', s.e] },
      );
      expect((await stopped.done).released).toBe(1);
      await a.done;
      expect(await effectRow(pool, s.e)).toMatchObject({ status: 'pending', locked_by: null, attempts: 1 });
      // The opted-in claim survived the stop; the batch found its owner stale and retired it.
      for (const req of a.requests)
        expect((await answered(pool, s.inst, req)).outcome).toBe(req[1] === s.e ? 'pending' : 'retired');
    });
  }

  for (const op of WRITE_BACKS) {
    it(`${op} held on the effect, then stop: the stop waits on that effect; the ${op} wins, the stop releases nothing`, async () => {
      const s = await stopScene(false);
      const [a, stopped] = await heldRace(
        { pool, opened },
        ['effects', s.e],
        { start: (on) => start(op, on, s), waitsOn: ['effects', s.e] },
        { start: (on) => ({ done: stop(on, s.owner) }), waitsOn: ['effects', s.e] },
      );
      expect(await a.done).toMatchObject({ accepted: [s.e] });
      expect((await stopped.done).released).toBe(0);
      expect(await effectRow(pool, s.e)).toMatchObject(
        op === 'complete'
          ? { status: 'completed', result: 'done' }
          : { status: 'pending', last_error: 'boom' },
      );
    });

    it(`stop held on its process row, then ${op}: it takes the instance (the stop holds none) and waits on the effect; the stop wins, the ${op} is rejected`, async () => {
      const s = await stopScene(false);
      const [stopped, a] = await heldRace(
        { pool, opened },
        ['effect_processes', s.owner],
        { start: (on) => ({ done: stop(on, s.owner) }), waitsOn: ['effect_processes', s.owner] },
        { start: (on) => start(op, on, s), waitsOn: ['effects', s.e] },
      );
      expect((await stopped.done).released).toBe(1);
      expect(await a.done).toMatchObject({ accepted: [], rejected: [s.e] });
      expect(await effectRow(pool, s.e)).toMatchObject({ status: 'pending', result: null, last_error: null });
    });
  }

  it('stop held on its process row: a claim never waits and does not see the effect being released; the next claim takes it', async () => {
    const s = await stopScene(false);
    const holder = await holdRows(pool, opened, [['effect_processes', s.owner]]);
    const stopper = await openRacer(opened);
    const stopped = stop(stopper.pool, s.owner);
    expect(await waitsOn(pool, stopper.pid)).toBe(await rowOf(pool, 'effect_processes', s.owner));
    const q = await registerProcess(pool, 'pairs-claimer');
    const claimer = await openRacer(opened);
    const claim = () => claimEffects(claimer.pool, q, { limit: 10, instanceId: s.inst });
    expect(await neverBlocked(pool, claimer.pid, claim())).toEqual([]);
    await holder.release();
    expect((await stopped).released).toBe(1);
    expect((await claim()).map((c) => c.id)).toEqual([s.e]);
  });
});

/** Two completed effects of one instance, `e` below `e2` in ID order, both opted in and bound. */
async function finishedScene(): Promise<Scene> {
  const inst = await newInstance(pool, 'pairs-prune');
  const handles = await emit(pool, inst, [
    { opts: { ...RECOVERY, notifyOnComplete: true } },
    { opts: { ...RECOVERY, notifyOnComplete: true } },
  ]);
  const [e, e2] = handles.map((h) => h.effectId).sort() as [string, string];
  const owner = await registerProcess(pool, 'pairs-prune');
  await claimOf(pool, owner, inst);
  await completeEffects(pool, owner, [
    { id: e, result: 1 },
    { id: e2, result: 1 },
  ]);
  return { pool, inst, owner, e, e2 };
}

/** `op` on `on`: a check or batch of the requests the test staged itself, else a write-back. */
async function startStaged(op: Op, on: Pool, s: Scene, staged: boolean): Promise<{ done: Promise<unknown> }> {
  return staged ? { done: processRecoveryChecks(on, s.inst, config) } : start(op, on, s);
}

type PruneCase = {
  table: 'effects' | 'effect_recoveries';
  /** Clock offset that makes the rows prunable; checks are staged before it. */
  ageMs: number;
  prune: (on: Parameters<typeof withTx>[0]) => Promise<number>;
  /** What a check that waited behind the prune answers. */
  afterPrune: string;
};

const PRUNES: Record<string, PruneCase> = {
  'effect pruning': {
    table: 'effects',
    ageMs: 2 * DAY,
    prune: (on) => withTx(on, { budgetMs: 10_000 }, (tx) => pruneEffects(tx, config.effectRetentionMs)),
    afterPrune: 'missing',
  },
  'binding pruning': {
    table: 'effect_recoveries',
    ageMs: 8 * DAY,
    prune: (on) => withTx(on, { budgetMs: 10_000 }, (tx) => pruneExpiredBindings(tx)),
    afterPrune: 'expired',
  },
};

for (const [name, c] of Object.entries(PRUNES))
  describe(`spec: "Lock order is origin instance, effects ordered by ID, recovery bindings ordered by effect ID": ${name} against checks${c.table === 'effects' ? ' and late write-backs' : ''}`, () => {
    const seconds =
      c.table === 'effects' ? (['check', 'batch', ...WRITE_BACKS] as const) : (['check', 'batch'] as const);
    for (const op of seconds) {
      it(`${name} held on the next ${c.table} row, then ${op}: it waits on the row the prune holds; the prune wins${op === 'check' || op === 'batch' ? `, the check answers ${c.afterPrune}` : ', the write-back is rejected'}`, async () => {
        const s = await finishedScene();
        // Checks are staged while their bindings live; the clock then moves past retention.
        const requests: [string, string][] = [];
        if (op === 'check' || op === 'batch')
          for (const id of op === 'check' ? [s.e] : [s.e, s.e2!])
            requests.push([await stageCheck(pool, s.inst, id), id]);
        await setDbClockOffset(pool, c.ageMs);
        // In ID order the prune already holds `e` when it waits on `e2`.
        const [pruned, second] = await heldRace(
          { pool, opened },
          [c.table, s.e2!],
          { start: (on) => ({ done: c.prune(on) }), waitsOn: [c.table, s.e2!] },
          {
            start: (on) => startStaged(op, on, s, op === 'check' || op === 'batch'),
            waitsOn: [c.table, s.e],
          },
        );
        expect(await pruned.done).toBeGreaterThanOrEqual(2);
        const out = await second.done;
        for (const req of requests)
          expect(await answered(pool, s.inst, req)).toEqual({ outcome: c.afterPrune, responses: 1 });
        if (!(out instanceof Map)) {
          expect(out).toMatchObject({ accepted: [], rejected: [s.e] });
          expect(await countKey(pool, s.inst, `effect:${s.e}:completed`)).toBe(1); // the original only
        }
        expect(
          c.table === 'effects' ? await effectRow(pool, s.e) : await bindingRow(pool, s.e),
        ).toBeUndefined();
      });

      it(`${op} held at its last lock, then ${name}: the prune waits on the ${c.table} row it holds; ${op} answers from it, the prune deletes after`, async () => {
        const s = await finishedScene();
        const requests: [string, string][] = [];
        if (op === 'check' || op === 'batch')
          for (const id of op === 'check' ? [s.e] : [s.e, s.e2!])
            requests.push([await stageCheck(pool, s.inst, id), id]);
        await setDbClockOffset(pool, c.ageMs);
        // A check has locked the instance, the effects and the bindings and written its
        // responses when it waits to record the outcome on its check row; a write-back waits
        // on the effect.
        const held: Row =
          requests.length > 0 ? ['effect_recovery_checks', requests[0]![0]] : ['effects', s.e];
        const [first, pruned] = await heldRace(
          { pool, opened },
          held,
          {
            start: (on) => startStaged(op, on, s, requests.length > 0),
            waitsOn: held,
          },
          { start: (on) => ({ done: c.prune(on) }), waitsOn: [c.table, s.e] },
        );
        const out = await first.done;
        expect(await pruned.done).toBeGreaterThanOrEqual(2);
        for (const req of requests)
          expect(await answered(pool, s.inst, req)).toEqual({ outcome: 'completed', responses: 1 });
        if (!(out instanceof Map)) expect(out).toMatchObject({ accepted: [], rejected: [s.e] });
        expect(
          c.table === 'effects' ? await effectRow(pool, s.e) : await bindingRow(pool, s.e),
        ).toBeUndefined();
      });
    }
  });
