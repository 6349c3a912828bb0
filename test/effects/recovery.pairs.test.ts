import { describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import type { EmitOptions } from '../../workers/effects/emit';
import { registerProcess } from '../../workers/effects/processes';
import { processRecoveryChecks, runRecoveryPass } from '../../workers/effects/recovery';
import { claimEffects } from '../../workers/effects/scheduler';
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
  isRecovery,
  type Op,
  openRacer,
  RECOVERY_OPS,
  type Scene,
  stageCheck,
  start,
  WRITE_BACKS,
} from './pairs';
import { holdRows, rowOf, waitsOn } from './row-locks';

/**
 * Every pair of operations that can meet on one effect, forced: the first is held at a lock
 * (a holder connection owns the row it needs next), the second is started and its wait is
 * named row by row (pg_locks), then the holder lets go. A deadlock fails the test (harness).
 * Process stop and pruning pairs: recovery.pairs.stop-prune.test.ts; ID order within a
 * statement: recovery.pairs.id-order.test.ts.
 */
const { pool, opened } = raceScope(12);

const RECOVERY: EmitOptions = { recovery: { operation: 'replace' } };
const OPS: Op[] = [...RECOVERY_OPS, ...WRITE_BACKS];

/** `e` (opted in, notifies on completion) and optionally `e2`, claimed by an owner gone stale. */
async function staleScene(withSecond: boolean, opts: EmitOptions = {}): Promise<Scene> {
  const inst = await newInstance(pool, 'pairs');
  const specs: { opts: EmitOptions }[] = [{ opts: { ...RECOVERY, notifyOnComplete: true, ...opts } }];
  if (withSecond) specs.push({ opts: RECOVERY });
  const [e, e2] = await emit(pool, inst, specs);
  const owner = await registerProcess(pool, 'pairs');
  await claimOf(pool, owner, inst);
  await ageHeartbeat(pool, owner, config.staleAfterMs + 1000);
  return { pool, inst, owner, e: e!.effectId, e2: e2?.effectId };
}

describe('spec: "Lock order is origin instance, effects ordered by ID, ..." and "Completion/failure lock the instance before the effect"', () => {
  for (const first of OPS)
    for (const second of OPS) {
      const onInstance = isRecovery(first) || isRecovery(second);
      it(`${first} held on the effect, then ${second}: it waits on the ${onInstance ? 'instance' : 'effect'}; the first wins, the loser changes nothing`, async () => {
        const s = await staleScene(first === 'batch' || second === 'batch');
        // A recovery pass or check takes the instance `for no key update`, a write-back `for
        // share`: only two write-backs share it, and then meet on the effect.
        const [a, b] = await heldRace(
          { pool, opened },
          ['effects', s.e],
          { start: (on) => start(first, on, s), waitsOn: ['effects', s.e] },
          {
            start: (on) => start(second, on, s),
            waitsOn: onInstance ? ['actor_instances', s.inst] : ['effects', s.e],
          },
        );
        const [ra, rb] = await Promise.all([a.done, b.done]);

        const e = await effectRow(pool, s.e);
        const retiredAt = (await bindingRow(pool, s.e))!.retired_at_ms;
        const recovery = await countKey(pool, s.inst, `effect:${s.e}:recovery`);
        const completed = await countKey(pool, s.inst, `effect:${s.e}:completed`);
        if (isRecovery(first)) {
          expect(retiredAt).not.toBeNull();
          expect(e).toMatchObject({ status: 'completed', locked_by: null, result: null });
          expect([recovery, completed]).toEqual([1, 0]);
        } else if (first === 'complete') {
          expect(retiredAt).toBeNull();
          expect(e).toMatchObject({ status: 'completed', locked_by: null, result: 'done' });
          expect([recovery, completed]).toEqual([0, 1]);
        } else {
          expect(retiredAt).toBeNull();
          expect(e).toMatchObject({ status: 'pending', locked_by: null, last_error: 'boom', attempts: 1 });
          expect([recovery, completed]).toEqual([0, 0]);
        }
        if (!isRecovery(first)) expect(ra).toMatchObject({ accepted: [s.e] });
        if (!isRecovery(second)) expect(rb).toMatchObject({ accepted: [], rejected: [s.e] });
        // One response per check; on `e` the first operation's own checks retired it, the
        // second's report what the first left.
        const lost = isRecovery(first) ? 'already_retired' : first === 'complete' ? 'completed' : 'pending';
        for (const [requests, outcome] of [
          [a.requests, 'retired'],
          [b.requests, lost],
        ] as const)
          for (const req of requests) {
            const got = await answered(pool, s.inst, req);
            expect(got.responses).toBe(1);
            if (req[1] === s.e) expect(got.outcome).toBe(outcome);
            else expect(['retired', 'already_retired']).toContain(got.outcome);
          }
        if (s.e2) expect(await countKey(pool, s.inst, `effect:${s.e2}:recovery`)).toBe(1);
      });
    }
});

describe('spec: "Pending claims lock the effect and never subsequently lock the instance"', () => {
  /** A due pending effect of `inst` (emitted after any claim the scene made). */
  async function pendingOf(inst: string, opts: EmitOptions = {}) {
    const [p] = await emit(pool, inst, [{ opts }]);
    return p!.effectId;
  }

  async function claimNeverBlocked(inst: string): Promise<string[]> {
    const q = await registerProcess(pool, 'pairs-claimer');
    const r = await openRacer(opened);
    const claimed = await neverBlocked(
      pool,
      r.pid,
      claimEffects(r.pool, q, { limit: 100, instanceId: inst }),
    );
    return claimed.map((c) => c.id);
  }

  it('a claim never waits while its instance row is held for update', async () => {
    const inst = await newInstance(pool, 'pairs');
    const p = await pendingOf(inst);
    const holder = await holdRows(pool, opened, [['actor_instances', inst]]);
    expect(await claimNeverBlocked(inst)).toEqual([p]);
    await holder.release();
  });

  for (const first of OPS)
    it(`${first} holds the instance and waits on an effect: a claim of another effect of that instance never waits`, async () => {
      const s = await staleScene(first === 'batch');
      const p = await pendingOf(s.inst);
      const holder = await holdRows(pool, opened, [['effects', s.e]]);
      const r1 = await openRacer(opened);
      const a = await start(first, r1.pool, s);
      expect(await waitsOn(pool, r1.pid)).toBe(await rowOf(pool, 'effects', s.e));
      expect(await claimNeverBlocked(s.inst)).toEqual([p]);
      await holder.release();
      await a.done;
      expect(await effectRow(pool, p)).toMatchObject({ status: 'processing' });
    });

  it('a check holds a pending effect and waits on its binding: a claim skips that effect and never waits; the check answers pending, the next claim takes it', async () => {
    const inst = await newInstance(pool, 'pairs');
    const p = await pendingOf(inst, RECOVERY);
    const holder = await holdRows(pool, opened, [['effect_recoveries', p]]);
    const checker = await openRacer(opened);
    const req = await stageCheck(pool, inst, p);
    const check = processRecoveryChecks(checker.pool, inst, config);
    expect(await waitsOn(pool, checker.pid)).toBe(await rowOf(pool, 'effect_recoveries', p));
    expect(await claimNeverBlocked(inst)).toEqual([]);
    await holder.release();
    expect((await check).get(req)).toEqual({ outcome: 'pending' });
    expect(await claimNeverBlocked(inst)).toEqual([p]);
  });

  for (const second of ['check', 'batch', 'claim'] as const)
    it(`a claim's transaction holds its effect: ${second} ${second === 'claim' ? 'skips it and never waits' : 'waits on that effect'}; the claim commits without waiting`, async () => {
      const inst = await newInstance(pool, 'pairs');
      const [p, p2] = [await pendingOf(inst, RECOVERY), await pendingOf(inst, RECOVERY)].sort() as [
        string,
        string,
      ];
      const q = await registerProcess(pool, 'pairs-claimer');
      const claim = await pool.connect();
      opened.push({
        async end() {
          await claim.query('rollback'); // after a commit only a warning: the test may have failed first
          claim.release();
        },
      });
      await claim.query('begin');
      // The lower ID is claimed: a batch over both meets it first.
      expect((await claimEffects(claim, q, { limit: 1, instanceId: inst })).map((c) => c.id)).toEqual([p]);
      if (second === 'claim') {
        expect(await claimNeverBlocked(inst)).toEqual([p2]);
        await claim.query('commit');
        return;
      }
      const r = await openRacer(opened);
      const reqs = await Promise.all(
        (second === 'check' ? [p] : [p, p2]).map((id) => stageCheck(pool, inst, id)),
      );
      const checks = processRecoveryChecks(r.pool, inst, config);
      expect(await waitsOn(pool, r.pid)).toBe(await rowOf(pool, 'effects', p));
      await claim.query('commit');
      const out = await checks;
      expect(out.get(reqs[0]!)).toEqual({ outcome: 'deferred', ownerId: q });
      if (reqs[1]) expect(out.get(reqs[1])).toEqual({ outcome: 'pending' });
    });
});

describe('spec: polling "does not lock fresh owners or their actors, even when the global liveness floor has elapsed but an effect\'s extended grace has not"', () => {
  for (const [label, silentMs, timeoutMs] of [
    ['inside the floor', 10_000, undefined],
    ['past the floor, inside its own grace', 60_000, 120_000],
  ] as const)
    it(`an owner ${label}, its actor and its effect all held: the poll never waits, and still retires a stale effect elsewhere`, async () => {
      const fresh = await newInstance(pool, 'pairs');
      const [e] = await emit(pool, fresh, [{ opts: { recovery: { operation: 'replace', timeoutMs } } }]);
      const owner = await registerProcess(pool, 'pairs');
      await claimOf(pool, owner, fresh);
      await ageHeartbeat(pool, owner, silentMs);
      const stale = await staleScene(false);
      // The actor commits, its effect is being written back, its owner is heartbeating.
      const holder = await holdRows(pool, opened, [
        ['actor_instances', fresh],
        ['effects', e!.effectId],
        ['effect_processes', owner],
      ]);
      const poller = await openRacer(opened);
      const report = await neverBlocked(pool, poller.pid, runRecoveryPass(poller.pool, config));
      expect(report.errors).toBe(0);
      expect((await bindingRow(pool, stale.e))!.retired_at_ms).not.toBeNull();
      await holder.release();
      expect(await effectRow(pool, e!.effectId)).toMatchObject({ status: 'processing', locked_by: owner });
      expect((await bindingRow(pool, e!.effectId))!.retired_at_ms).toBeNull();
    });
});

describe('spec: "Mailbox insertion reuses the origin instance lock"', () => {
  for (const op of ['complete', 'fail', 'check'] as const)
    it(`${op}: its callback insert never queues behind an instance delete that waits on the instance lock it holds`, async () => {
      const s = await staleScene(false, op === 'fail' ? { maxAttempts: 1 } : {});
      const holder = await holdRows(pool, opened, [['effects', s.e]]);
      const [r, deleter] = [await openRacer(opened), await openRacer(opened)];
      const a = await start(op, r.pool, s);
      expect(await waitsOn(pool, r.pid)).toBe(await rowOf(pool, 'effects', s.e));
      // A delete takes the instance `for update`, the only lock a mailbox row's key-share
      // check conflicts with; it queues on the lock the operation already holds.
      const del = withTx(deleter.pool, { budgetMs: 10_000 }, (tx) =>
        tx.query('delete from actor_instances where id = $1', [s.inst]),
      );
      expect(await waitsOn(pool, deleter.pid)).toBe(await rowOf(pool, 'actor_instances', s.inst));
      await holder.release();
      const done = await a.done;
      if (op === 'check')
        expect((done as Map<string, unknown>).get(a.requests[0]![0])).toMatchObject({ outcome: 'retired' });
      else expect(done).toMatchObject({ accepted: [s.e] });
      expect((await del).rowCount).toBe(1);
    });
});
