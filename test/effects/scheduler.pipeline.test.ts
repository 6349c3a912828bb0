import type { Pool } from '@neondatabase/serverless';
import { describe, expect, it } from 'vitest';
import { registerProcess } from '../../workers/effects/processes';
import { EffectRegistry } from '../../workers/effects/registry';
import { runEffectsUntilShort } from '../../workers/effects/runner';
import { claimEffects, completeEffects } from '../../workers/effects/scheduler';
import { waitUntilBlocked } from '../helpers/db';
import { effectRow, emit, neverBlocked, newInstance, racer, raceScope } from './helpers';
import { holdRows } from './row-locks';

/**
 * Issue 35 (the drain against graphile-worker): a drain's completion claims the next batch in
 * the same statement (`effects_complete_then_claim`), one commit per batch instead of two. The
 * spec's rules must hold through it: "Completion/failure lock the instance before the effect"
 * and "Pending claims lock the effect and never subsequently lock the instance": the claim
 * comes after every lock of the completion, never waits, and a failed statement claims nothing.
 */
const { pool, opened } = raceScope();

async function openRacer() {
  const r = await racer();
  opened.push(r.pool);
  return r;
}

/** `n` pending effects of one new instance, IDs sorted; `first` of them claimed by a new process. */
async function staged(n: number, first: number) {
  const inst = await newInstance(pool, 'pipeline');
  const ids = (
    await emit(
      pool,
      inst,
      Array.from({ length: n }, () => ({})),
    )
  )
    .map((h) => h.effectId)
    .sort();
  const owner = await registerProcess(pool, 'pipeline');
  const claimed = await claimEffects(pool, owner, { limit: first, instanceId: inst });
  expect(claimed).toHaveLength(first);
  return { inst, owner, ids, claimed: claimed.map((e) => e.id) };
}

/** The transaction that last wrote each row (`xmin`). */
async function writers(ids: string[]): Promise<Map<string, string>> {
  const { rows } = await pool.query<{ id: string; x: string }>(
    'select id, xmin::text as x from effects where id = any($1::uuid[])',
    [ids],
  );
  return new Map(rows.map((r) => [r.id, r.x]));
}

describe('a completion that claims the next batch (issue 35)', () => {
  it('writes the batch and claims the next in one transaction: the completed and the newly claimed rows share their writer', async () => {
    const { inst, owner, ids, claimed } = await staged(4, 2);
    const r = await completeEffects(
      pool,
      owner,
      claimed.map((id) => ({ id, result: { ok: id } })),
      5000,
      { limit: 2, instanceId: inst },
    );
    expect(r.accepted.sort()).toEqual(claimed.sort());
    const next = (r.next ?? []).map((e) => e.id).sort();
    expect(next).toEqual(ids.filter((id) => !claimed.includes(id)));
    for (const id of claimed)
      expect(await effectRow(pool, id)).toMatchObject({ status: 'completed', locked_by: null });
    for (const id of next)
      expect(await effectRow(pool, id)).toMatchObject({
        status: 'processing',
        locked_by: owner,
        attempts: 1,
      });
    const xmin = await writers(ids);
    expect(new Set(ids.map((id) => xmin.get(id))).size).toBe(1);
  });

  it('the claim after the completion never waits: a pending effect held elsewhere is skipped, the others are claimed', async () => {
    const { inst, owner, ids, claimed } = await staged(4, 1);
    const rest = ids.filter((id) => !claimed.includes(id));
    const holder = await holdRows(pool, opened, [['effects', rest[1]!]]);
    const r = await openRacer();
    const done = await neverBlocked(
      pool,
      r.pid,
      completeEffects(
        r.pool,
        owner,
        claimed.map((id) => ({ id, result: 1 })),
        5000,
        { limit: 10, instanceId: inst },
      ),
    );
    expect(done.accepted).toEqual(claimed);
    expect((done.next ?? []).map((e) => e.id).sort()).toEqual([rest[0], rest[2]].sort());
    await holder.release();
    expect(await effectRow(pool, rest[1]!)).toMatchObject({ status: 'pending', locked_by: null });
  });

  it('the instance is locked before anything is claimed: blocked on its instance, it holds no pending effect', async () => {
    const { inst, owner, ids, claimed } = await staged(3, 1);
    const holder = await holdRows(pool, opened, [['actor_instances', inst]]);
    const r = await openRacer();
    const write = completeEffects(
      r.pool,
      owner,
      claimed.map((id) => ({ id, result: 1 })),
      5000,
      { limit: 10, instanceId: inst },
    );
    await waitUntilBlocked(pool, r.pid);
    // While it waits on the instance, every pending effect is free: it has claimed nothing.
    const pending = ids.filter((id) => !claimed.includes(id));
    const free = await pool.connect();
    try {
      await free.query('begin');
      const { rowCount } = await free.query(
        'select 1 from effects where id = any($1::uuid[]) for update nowait',
        [pending],
      );
      expect(rowCount).toBe(pending.length);
      await free.query('rollback');
    } finally {
      free.release();
    }
    await holder.release();
    const done = await write;
    expect(done.accepted).toEqual(claimed);
    expect((done.next ?? []).map((e) => e.id).sort()).toEqual(pending);
  });

  it('a completion that fails claims nothing: its batch stays claimed and the pending effects stay pending', async () => {
    const { inst, owner, ids, claimed } = await staged(3, 1);
    // Held past the write-back's budget: its lock timeout fails the statement (not retried).
    const holder = await holdRows(pool, opened, [['actor_instances', inst]]);
    await expect(
      completeEffects(
        pool,
        owner,
        claimed.map((id) => ({ id, result: 1 })),
        300,
        { limit: 10, instanceId: inst },
      ),
    ).rejects.toMatchObject({ code: '55P03' });
    await holder.release();
    expect(await effectRow(pool, claimed[0]!)).toMatchObject({ status: 'processing', locked_by: owner });
    for (const id of ids.filter((i) => !claimed.includes(i)))
      expect(await effectRow(pool, id)).toMatchObject({ status: 'pending', locked_by: null, attempts: 0 });
  });
});

describe("the host's drain of its instance (runEffectsUntilShort)", () => {
  it('a full batch claims the next in its completion; a short one ends the drain; every effect runs once', async () => {
    const runs: string[] = [];
    const registry = new EffectRegistry().registerEffect({
      kind: 'pipeline.ok',
      run: async (e) => {
        runs.push(e.id);
        return { ok: true };
      },
    });
    const inst = await newInstance(pool, 'pipeline');
    const ids = (
      await emit(
        pool,
        inst,
        Array.from({ length: 5 }, () => ({ kind: 'pipeline.ok' })),
      )
    ).map((h) => h.effectId);
    const owner = await registerProcess(pool, 'pipeline');
    const statements: string[] = [];
    const counting = new Proxy(pool, {
      get(target, prop, receiver) {
        if (prop === 'query')
          return (text: string, ...rest: unknown[]) => {
            statements.push(/from (effects_\w+)\(/.exec(text)?.[1] ?? text.slice(0, 40));
            return (target.query as (t: string, ...r: unknown[]) => unknown)(text, ...rest);
          };
        return Reflect.get(target, prop, receiver);
      },
    }) as Pool;
    let beats = 0;
    const r = await runEffectsUntilShort(counting, registry, owner, {
      limit: 2,
      instanceId: inst,
      beforeClaim: async () => {
        beats++;
      },
    });
    expect(r).toMatchObject({ claimed: 5, completed: 5, failed: 0, lost: 0 });
    expect(runs.sort()).toEqual([...ids].sort());
    // 2 + 2 + 1: one claim alone, two completions that claim, the short batch's completion.
    expect(statements).toEqual([
      'effects_claim',
      'effects_complete_then_claim',
      'effects_complete_then_claim',
      'effects_complete',
    ]);
    // Before the first claim and before each completion that claims.
    expect(beats).toBe(3);
    for (const id of ids)
      expect(await effectRow(pool, id)).toMatchObject({ status: 'completed', attempts: 1 });
  });
});
