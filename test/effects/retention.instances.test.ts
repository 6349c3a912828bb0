import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { CONVERSATION_INSTANCE_RETENTION } from '../../workers/channel/conversation';
import { registerConversationEngine } from '../../workers/channel/engine';
import { CONVERSATION_ACTOR } from '../../workers/channel/session';
import { withTx } from '../../workers/db/tx';
import { pruneEffectRows } from '../../workers/effects/cron';
import { type InstanceRetentionRule, pruneIdleInstances } from '../../workers/effects/instance-retention';
import { enqueueMessage, ensureInstance, loadInstance } from '../../workers/effects/mailbox';
import { registerProcess } from '../../workers/effects/processes';
import { EffectRegistry } from '../../workers/effects/registry';
import { claimEffects, completeEffects } from '../../workers/effects/scheduler';
import { pruneIdleConversations } from '../../workers/housekeeping/conversations';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';
import { config, emit, newInstance } from './helpers';

/**
 * Issue 35 hole 9: actor_instances grew forever. An actor type opts in with a retention
 * (`ActorType.retention`); the minute retention then deletes its instances once idle, and
 * only then: nothing in flight, nothing a later input or check could still need.
 */
const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const DAY = 86_400_000;
const TYPE = 'ret-idle';
const rules: InstanceRetentionRule[] = [{ actorType: TYPE, idleMs: 2 * DAY }];

const instanceExists = async (id: string) => (await loadInstance(pool, id)) !== null;
const count = async (sql: string, args: unknown[]) => (await pool.query(sql, args)).rowCount ?? 0;

/** An instance with a completed effect (bound for recovery, so with a binding) and nothing else. */
async function finished(type = TYPE, opts = {}) {
  const inst = await newInstance(pool, type);
  const [h] = await emit(pool, inst, [{ opts }]);
  const owner = await registerProcess(pool, 'ret-test');
  expect(await claimEffects(pool, owner, { limit: 10, instanceId: inst })).toHaveLength(1);
  expect((await completeEffects(pool, owner, [{ id: h!.effectId, result: 1 }])).accepted).toHaveLength(1);
  return { inst, effectId: h!.effectId, owner };
}

const prune = (batch = 1000, r = rules) =>
  withTx(pool, { budgetMs: 5000 }, (tx) => pruneIdleInstances(tx, r, batch));

describe('issue 35 hole 9: idle actor instances have a retention rule', () => {
  it('the minute retention deletes an idle instance of an opted-in type with its effect and binding; a type without a rule keeps its instance; the next input starts a fresh instance', async () => {
    const registry = new EffectRegistry().registerActor({
      type: TYPE,
      initialState: () => ({}),
      handle: (_e, s) => s,
      retention: { idleMs: 2 * DAY },
    });
    const gone = await finished(TYPE, { recovery: { operation: 'r' } });
    const kept = await finished('ret-no-rule');
    await pool.query(`update actor_instances set state = '{"turnNo": 7}', revision = 9 where id = $1`, [
      gone.inst,
    ]);
    await advanceDbClock(pool, 9 * DAY); // past the 7-day binding lifetime and the 2 idle days
    const report = await pruneEffectRows(pool, config, { registry });
    expect(report).toMatchObject({ effects: 2, bindings: 1, instances: 1, failed: [] });
    expect(await instanceExists(gone.inst)).toBe(false);
    expect(await instanceExists(kept.inst)).toBe(true);
    // Re-created by its next input (ensureInstance's `on conflict do nothing`), from scratch.
    const [type, key] = [TYPE, gone.inst.slice(TYPE.length + 1)];
    expect(await ensureInstance(pool, type, key)).toBe(gone.inst);
    expect(await loadInstance(pool, gone.inst)).toMatchObject({ revision: '0', state: {} });
  });

  it('deletes the effects and bindings of the instance itself, by its own rule, before their tables prune them', async () => {
    const s = await finished(TYPE, { recovery: { operation: 'r' } });
    await advanceDbClock(pool, 9 * DAY);
    expect(await prune()).toEqual({ instances: 1, effects: 1, bindings: 1 });
    expect(await count('select 1 from effects where id = $1', [s.effectId])).toBe(0);
    expect(await count('select 1 from effect_recoveries where effect_id = $1', [s.effectId])).toBe(0);
  });

  it('keeps every instance that is not idle: a pending, delivered or dead message, a timer, a pending or processing effect, a live binding, an open or resolved check, a recent commit, a recent effect end, a keepWhile', async () => {
    const keepRules: InstanceRetentionRule[] = [
      ...rules,
      { actorType: 'ret-keep', idleMs: 2 * DAY, keepWhile: `coalesce(i.state ->> 'keep', '') = 'yes'` },
    ];
    const idle = await finished();
    const pendingMsg = await finished();
    await enqueueMessage(pool, pendingMsg.inst, 'in:1', {});
    const deliveredMsg = await finished();
    await enqueueMessage(pool, deliveredMsg.inst, 'in:1', {});
    await pool.query(
      `update actor_mailbox set state = 'delivered', delivered_at_ms = app_now_ms() where instance_id = $1`,
      [deliveredMsg.inst],
    );
    const deadMsg = await finished();
    await enqueueMessage(pool, deadMsg.inst, 'in:1', {});
    await pool.query(
      `update actor_mailbox set state = 'dead', dead_at_ms = app_now_ms(), attempts = 5 where instance_id = $1`,
      [deadMsg.inst],
    );
    const timer = await finished();
    await pool.query('update actor_instances set wake_at_ms = app_now_ms() + $2 where id = $1', [
      timer.inst,
      30 * DAY,
    ]);
    const pendingEffect = await newInstance(pool, TYPE);
    await emit(pool, pendingEffect, [{ opts: { delayMs: 7 * DAY } }]);
    const processing = await newInstance(pool, TYPE);
    await emit(pool, processing, [{}]);
    const owner = await registerProcess(pool, 'ret-test');
    expect(await claimEffects(pool, owner, { limit: 10, instanceId: processing })).toHaveLength(1);
    // Completed at once, bound for recovery: its binding lives 7 days past the end.
    const liveBinding = await finished(TYPE, { recovery: { operation: 'r' } });
    const openCheck = await finished();
    const resolvedCheck = await finished();
    for (const [inst, outcome] of [
      [openCheck.inst, null],
      [resolvedCheck.inst, 'completed'],
    ] as const)
      await pool.query(
        `insert into effect_recovery_checks (effect_id, origin_instance_id, outcome, resolved_at_ms)
         values (gen_random_uuid(), $1, $2::text, case when $2::text is null then null else app_now_ms() end)`,
        [inst, outcome],
      );
    const keep = await finished('ret-keep');
    await pool.query(`update actor_instances set state = '{"keep": "yes"}' where id = $1`, [keep.inst]);
    const dropKeep = await finished('ret-keep');
    await advanceDbClock(pool, 3 * DAY);
    const recentCommit = await finished();
    await advanceDbClock(pool, -2 * DAY); // committed 2 days ago: "now" is 3 days after the rest
    await emit(pool, recentCommit.inst, []);
    await advanceDbClock(pool, 2 * DAY);
    const recentEnd = await newInstance(pool, TYPE);
    await advanceDbClock(pool, -3 * DAY);
    const [late] = await emit(pool, recentEnd, [{}]);
    await advanceDbClock(pool, 2 * DAY);
    const lateOwner = await registerProcess(pool, 'ret-test');
    await claimEffects(pool, lateOwner, { limit: 10, instanceId: recentEnd });
    await completeEffects(pool, lateOwner, [{ id: late!.effectId, result: 1 }]); // ended 1 day ago
    await advanceDbClock(pool, DAY);

    const kept = {
      pendingMsg: pendingMsg.inst,
      deliveredMsg: deliveredMsg.inst,
      deadMsg: deadMsg.inst,
      timer: timer.inst,
      pendingEffect,
      processing,
      liveBinding: liveBinding.inst,
      openCheck: openCheck.inst,
      resolvedCheck: resolvedCheck.inst,
      keep: keep.inst,
      recentCommit: recentCommit.inst,
      recentEnd,
    };
    expect((await prune(1000, keepRules)).instances).toBe(2);
    expect(await instanceExists(idle.inst)).toBe(false);
    expect(await instanceExists(dropKeep.inst)).toBe(false);
    const left = Object.fromEntries(
      await Promise.all(Object.entries(kept).map(async ([k, id]) => [k, await instanceExists(id)] as const)),
    );
    expect(left).toEqual(Object.fromEntries(Object.keys(kept).map((k) => [k, true])));
  });

  it('one bounded batch per run, oldest commit first', async () => {
    const a = await finished('ret-batch');
    await advanceDbClock(pool, 60_000);
    const b = await finished('ret-batch');
    await advanceDbClock(pool, 60_000);
    const c = await finished('ret-batch');
    await advanceDbClock(pool, 3 * DAY);
    const batchRules = [{ actorType: 'ret-batch', idleMs: 2 * DAY }];
    expect((await prune(2, batchRules)).instances).toBe(2);
    expect([
      await instanceExists(a.inst),
      await instanceExists(b.inst),
      await instanceExists(c.inst),
    ]).toEqual([false, false, true]);
    expect((await prune(2, batchRules)).instances).toBe(1);
    expect(await instanceExists(c.inst)).toBe(false);
  });

  it('a rule shorter than a day, or not an integer, deletes nothing', async () => {
    const s = await finished('ret-short');
    await advanceDbClock(pool, 3 * DAY);
    expect(await prune(1000, [{ actorType: 'ret-short', idleMs: DAY - 1 }])).toMatchObject({ instances: 0 });
    expect(await prune(1000, [{ actorType: 'ret-short', idleMs: 1.5 * DAY + 0.5 }])).toMatchObject({
      instances: 0,
    });
    expect(await instanceExists(s.inst)).toBe(true);
  });

  it("the conversation actor's instance stays while its conversation row exists, and goes once housekeeping deleted it", async () => {
    const conv = [{ actorType: 'ret-conv', ...CONVERSATION_INSTANCE_RETENTION }];
    const s = await finished('ret-conv');
    // The keepWhile reads the conversation by the instance id (the channel's session id).
    await pool.query(
      `insert into channel_conversations (id, installation_id, workspace_id, app_id, chat_id, last_position)
       values ($1, 'inst', 'ws', 'app', $2, 1)`,
      [s.inst, uid('chat')],
    );
    await advanceDbClock(pool, 9 * DAY);
    expect((await prune(1000, conv)).instances).toBe(0);
    expect(await instanceExists(s.inst)).toBe(true);
    await pool.query('delete from channel_conversations where id = $1', [s.inst]);
    expect((await prune(1000, conv)).instances).toBe(1);
    expect(await instanceExists(s.inst)).toBe(false);
  });

  it("through the registration the Worker makes: a conversation's instance survives the minute retention while housekeeping keeps the conversation, and goes at the first retention after housekeeping deleted it", async () => {
    const session = uid('session');
    await pool.query(
      `insert into channel_conversations (id, installation_id, workspace_id, app_id, chat_id, last_position, created_at, updated_at)
       values ($1, 'inst', 'ws', 'app', $2, 10, app_now(), app_now())`,
      [session, uid('chat')],
    );
    await pool.query(
      `insert into actor_instances (id, actor_type, actor_key, state)
       values ($1, $2, $1, '{"pending": [], "turn": null, "turnNo": 3}')`,
      [session, CONVERSATION_ACTOR],
    );
    await advanceDbClock(pool, 31 * DAY);
    const registry = registerConversationEngine(new EffectRegistry());
    expect((await pruneEffectRows(pool, config, { registry })).instances).toBe(0);
    expect(await instanceExists(session)).toBe(true);
    expect(await pruneIdleConversations(pool, 30 * DAY, 1000)).toBeGreaterThanOrEqual(1);
    expect((await pruneEffectRows(pool, config, { registry })).instances).toBe(1);
    expect(await instanceExists(session)).toBe(false);
  });
});
