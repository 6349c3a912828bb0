import type { Pool } from '@neondatabase/serverless';
import { describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { type InstanceRetentionRule, pruneIdleInstances } from '../../workers/effects/instance-retention';
import { enqueueCtes, loadInstance } from '../../workers/effects/mailbox';
import { registerProcess, stopProcess } from '../../workers/effects/processes';
import { pruneEffects, pruneExpiredBindings } from '../../workers/effects/recovery';
import { completeEffects } from '../../workers/effects/scheduler';
import { advanceDbClock, uid } from '../helpers/db';
import { claimOf, effectRow, emit, neverBlocked, newInstance, racer, raceScope } from './helpers';
import { holdRows, inHeapOrder, layOutAgainstIdOrder, rowOf, waitsOn } from './row-locks';

/**
 * Issue 35 hole 9: deleting an instance must lock its rows in the order every other path uses
 * (docs/effects.md, "Lock order"): the instance, its effects by ID, its bindings by effect ID.
 * An instance delete that left them to ON DELETE CASCADE locked them in the cascade query's
 * plan order, the heap order under a sequential or bitmap scan, against effect pruning (effects
 * by ID) and binding pruning (bindings by effect ID): a deadlock.
 *
 * Each race is forced as in recovery.pairs.id-order.test.ts: the rows are laid out on the heap
 * against ID order (highest ID first, a barrier row, lowest ID last), the plans are pinned to
 * sequential scans, a holder connection owns the barrier row, the retention is started and the
 * exact row it waits on is read from pg_locks, then the pruner; then the holder lets go. A
 * deadlock fails the test (test/setup/tx-retries.ts). Its own file: the layout needs a table
 * with few dead versions; it is asserted, never assumed.
 */
const { pool, opened } = raceScope();

const DAY = 86_400_000;
const TYPE = 'ret-order';
const rules: InstanceRetentionRule[] = [{ actorType: TYPE, idleMs: DAY }];

async function openRacer() {
  const r = await racer();
  opened.push(r.pool);
  return r;
}

/** An instance whose three effects completed (bound for recovery when asked), IDs sorted. */
async function threeFinished(opts = {}) {
  const inst = await newInstance(pool, TYPE);
  const handles = await emit(pool, inst, [{ opts }, { opts }, { opts }]);
  const owner = await registerProcess(pool, 'ret-order');
  await claimOf(pool, owner, inst);
  const ids = handles.map((h) => h.effectId).sort();
  const done = await completeEffects(
    pool,
    owner,
    ids.map((id) => ({ id, result: 1 })),
  );
  expect(done.accepted).toHaveLength(3);
  return { inst, ids: ids as [string, string, string] };
}

describe('issue 35 hole 9: instance retention locks in the runtime order, against pruning and process stop', () => {
  it('instance retention deletes the effects in ID order: effect pruning, held behind it on the lowest effect, waits; no deadlock, the retention deletes the instance and the prune finds nothing left', async () => {
    const { inst, ids } = await threeFinished();
    const [lo, mid] = ids;
    await layOutAgainstIdOrder(pool, 'effects', ids);
    await advanceDbClock(pool, 2 * DAY); // idle for the rule's day, and past effect retention
    const [loRow, midRow] = [await rowOf(pool, 'effects', lo), await rowOf(pool, 'effects', mid)];
    const holder = await holdRows(pool, opened, [['effects', mid]]);
    const retainer = await openRacer();
    const pruner = await openRacer();
    const retention = inHeapOrder(retainer.pool, (tx) => pruneIdleInstances(tx, rules));
    expect(await waitsOn(pool, retainer.pid)).toBe(midRow);
    const prune = inHeapOrder(pruner.pool, (tx) => pruneEffects(tx, 0));
    // In ID order the retention already holds the lowest effect: the prune waits there.
    const prunerWaitsOn = await waitsOn(pool, pruner.pid);
    await holder.release();
    expect(await retention).toEqual({ instances: 1, effects: 3, bindings: 0 });
    expect(await prune).toBe(0);
    expect(prunerWaitsOn).toBe(loRow);
    expect(await loadInstance(pool, inst)).toBeNull();
    for (const id of ids) expect(await effectRow(pool, id)).toBeUndefined();
  });

  it('instance retention deletes the bindings in effect-ID order: binding pruning, held behind it on the lowest binding, waits; no deadlock', async () => {
    const { inst, ids } = await threeFinished({ recovery: { operation: 'replace' } });
    const [lo, mid] = ids;
    await layOutAgainstIdOrder(pool, 'effect_recoveries', ids);
    await advanceDbClock(pool, 8 * DAY); // the bindings' 7-day lifetime is over
    const [loRow, midRow] = [
      await rowOf(pool, 'effect_recoveries', lo),
      await rowOf(pool, 'effect_recoveries', mid),
    ];
    const holder = await holdRows(pool, opened, [['effect_recoveries', mid]]);
    const retainer = await openRacer();
    const pruner = await openRacer();
    const retention = inHeapOrder(retainer.pool, (tx) => pruneIdleInstances(tx, rules));
    expect(await waitsOn(pool, retainer.pid)).toBe(midRow);
    const prune = inHeapOrder(pruner.pool, (tx) => pruneExpiredBindings(tx));
    const prunerWaitsOn = await waitsOn(pool, pruner.pid);
    await holder.release();
    expect(await retention).toEqual({ instances: 1, effects: 3, bindings: 3 });
    expect(await prune).toBe(0);
    expect(prunerWaitsOn).toBe(loRow);
    expect(await loadInstance(pool, inst)).toBeNull();
  });

  it('process stop held between the effect it releases and its process row: instance retention never waits, keeps the stopping process instance, deletes an idle one; the stop then releases its effect', async () => {
    const idle = await threeFinished();
    const busy = await newInstance(pool, TYPE);
    const [h] = await emit(pool, busy, [{}]);
    const owner = await registerProcess(pool, 'ret-order');
    await claimOf(pool, owner, busy);
    await advanceDbClock(pool, 2 * DAY);
    const holder = await holdRows(pool, opened, [['effect_processes', owner]]);
    const stopper = await openRacer();
    const retainer = await openRacer();
    const stop = withTx(stopper.pool, { budgetMs: 10_000 }, (tx) => stopProcess(tx, owner));
    // The stop holds the effect it releases and waits on its process row.
    expect(await waitsOn(pool, stopper.pid)).toBe(await rowOf(pool, 'effect_processes', owner));
    const retention = inHeapOrder(retainer.pool, (tx) => pruneIdleInstances(tx, rules));
    expect(await neverBlocked(pool, retainer.pid, retention)).toEqual({
      instances: 1,
      effects: 3,
      bindings: 0,
    });
    await holder.release();
    expect(await stop).toEqual({ released: 1 });
    expect(await loadInstance(pool, idle.inst)).toBeNull();
    expect(await loadInstance(pool, busy)).not.toBeNull();
    expect(await effectRow(pool, h!.effectId)).toMatchObject({ status: 'pending', locked_by: null });
  });

  it("a message accepted while the retention holds the instance (locked, not yet deleted): the accept statement's instance insert does nothing, its message's foreign key fails once the delete commits, nothing of it is written, and its redelivery starts a fresh instance", async () => {
    // The webhook's shape (workers/channel/accept.ts): conversation upsert, then the instance
    // and its `in:<n>` message through enqueueCtes, one autocommit statement.
    const { inst, ids } = await threeFinished();
    await advanceDbClock(pool, 2 * DAY);
    const accept = (p: Pool) =>
      p.query(
        `with conv as (
           insert into channel_conversations (id, installation_id, workspace_id, app_id, chat_id, last_position)
           values ($1, 'inst', 'ws', 'app', $3, 1)
           on conflict (id) do update set last_position = channel_conversations.last_position + 1
           returning last_position as position
         ), ${enqueueCtes({
           instanceId: '$1',
           actorType: '$2',
           actorKey: '$4',
           state: `'{}'::jsonb`,
           key: `'in:' || conv.position`,
           payload: `'{}'::jsonb`,
           from: 'conv',
         })}
         select 1`,
        [inst, TYPE, uid('chat'), inst.slice(TYPE.length + 1)],
      );
    // The retention holds the instance and waits on its highest effect.
    const holder = await holdRows(pool, opened, [['effects', ids[2]]]);
    const retainer = await openRacer();
    const webhook = await openRacer();
    const retention = withTx(retainer.pool, { budgetMs: 10_000 }, (tx) => pruneIdleInstances(tx, rules));
    expect(await waitsOn(pool, retainer.pid)).toBe(await rowOf(pool, 'effects', ids[2]));
    const instanceRow = await rowOf(pool, 'actor_instances', inst);
    const accepted = accept(webhook.pool).then(
      () => null,
      (err: { code?: string }) => err.code ?? 'error',
    );
    expect(await waitsOn(pool, webhook.pid)).toBe(instanceRow);
    await holder.release();
    expect(await retention).toEqual({ instances: 1, effects: 3, bindings: 0 });
    expect(await accepted).toBe('23503'); // foreign_key_violation: the webhook answers 5xx
    expect(await loadInstance(pool, inst)).toBeNull();
    const written = await pool.query(
      `select (select count(*) from channel_conversations where id = $1)::int as conversations,
              (select count(*) from actor_mailbox where instance_id = $1)::int as messages`,
      [inst],
    );
    expect(written.rows[0]).toEqual({ conversations: 0, messages: 0 });
    // Lark redelivers: conversation, instance (revision 0, empty state) and message, from scratch.
    await accept(pool);
    expect(await loadInstance(pool, inst)).toMatchObject({ revision: '0', state: {} });
    expect(
      (await pool.query('select message_key from actor_mailbox where instance_id = $1', [inst])).rows,
    ).toEqual([{ message_key: 'in:1' }]);
  });
});
