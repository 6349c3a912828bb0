import { afterAll, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { commitActor } from '../../workers/effects/commit';
import { enqueueMessage, loadInstance } from '../../workers/effects/mailbox';
import { registerProcess } from '../../workers/effects/processes';
import { EffectRegistry } from '../../workers/effects/registry';
import { drainInstance, runClaimedEffects } from '../../workers/effects/runner';
import { ShapeVersionRefused, withShapeVersion } from '../../workers/lib/shape-version';
import { testPool, uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { config, effectRow, emit, newInstance } from './helpers';

/**
 * Issue 31 item 1: what two releases exchange through Postgres carries a shape version
 * (workers/lib/shape-version.ts). A reader accepts the previous version and its own; one
 * written by a newer release is refused before anything reads it (never misread), with a
 * stable error and the `shape_version_refused` event, and a refused mailbox message is not
 * counted as a failed delivery (it stays first in line for the newer release).
 */
const handled: { key: string; payload: unknown }[] = [];
const ran: unknown[] = [];
const registry = new EffectRegistry()
  .registerActor<Record<string, unknown>>({
    type: 'shapes-v2',
    initialState: () => ({}),
    // This release reads messages up to version 2 (version 1 carries no `_v`).
    messageVersion: 2,
    handle(event, state) {
      if (event.type === 'message') handled.push({ key: event.key, payload: event.payload });
      return state;
    },
  })
  .registerEffect({
    kind: 'shapes.exec',
    run: async (e) => {
      ran.push(e.args);
      return { ok: true };
    },
  });

const pool = testPool();
afterAll(() => pool.end());

async function mailboxRow(instanceId: string, key: string) {
  const { rows } = await pool.query<{ state: string; attempts: number }>(
    'select state, attempts from actor_mailbox where instance_id = $1 and message_key = $2',
    [instanceId, key],
  );
  return rows[0];
}

describe('shape versions: the previous is read, a newer one is refused visibly', () => {
  it('shape_versions.messages: versions 1 and 2 are delivered; a version-3 payload is refused before the handler, not counted, and keeps its place', async () => {
    const inst = await newInstance(pool, 'shapes-v2');
    await enqueueMessage(pool, inst, 'v1', { text: 'as the first release wrote it' });
    await enqueueMessage(pool, inst, 'v2', withShapeVersion({ text: 'bumped' }, 2));
    expect(await drainInstance(pool, registry, inst, config)).toBe(2);
    expect(handled.map((h) => h.key)).toEqual(['v1', 'v2']);

    await enqueueMessage(pool, inst, 'v3', withShapeVersion({ text: 'from a newer release' }, 3));
    await enqueueMessage(pool, inst, 'after', { text: 'behind it' });
    const logs = captureLogLines({ quiet: true });
    try {
      const refused = drainInstance(pool, registry, inst, config);
      await expect(refused).rejects.toBeInstanceOf(ShapeVersionRefused);
      await expect(drainInstance(pool, registry, inst, config)).rejects.toMatchObject({
        code: 'precondition_failed',
        details: { reason: 'shape_version_unsupported', version: 3, known: 2 },
      });
    } finally {
      logs.restore();
    }
    expect(handled.map((h) => h.key)).toEqual(['v1', 'v2']);
    // Not a failed delivery: no attempt counted, never dead-lettered, still first in line.
    expect(await mailboxRow(inst, 'v3')).toEqual({ state: 'pending', attempts: 0 });
    expect(await mailboxRow(inst, 'after')).toEqual({ state: 'pending', attempts: 0 });
    const events = logs.lines.filter((l) => l.event === 'shape_version_refused');
    expect(events).toHaveLength(2);
    expect(events[0]).toMatchObject({ level: 'error', shape: 'shapes-v2 message', version: 3, known: 2 });
    // Ids only: the payload is never logged.
    expect(JSON.stringify(events)).not.toContain('from a newer release');
  });

  it('shape_versions.effect_results: a result of a newer version inside its completion callback is refused like the message itself', async () => {
    const inst = await newInstance(pool, 'shapes-v2');
    const effectId = '01a23775-70b3-7097-bab1-724f45773faf';
    // As effects_complete writes it (applications may not enqueue `effect:` keys).
    await pool.query(`insert into actor_mailbox (instance_id, message_key, payload) values ($1, $2, $3)`, [
      inst,
      `effect:${effectId}:completed`,
      { effectId, result: withShapeVersion({ replied: true }, 3) },
    ]);
    const logs = captureLogLines({ quiet: true });
    try {
      await expect(drainInstance(pool, registry, inst, config)).rejects.toMatchObject({
        details: {
          reason: 'shape_version_unsupported',
          shape: 'shapes-v2 effect result',
          version: 3,
          known: 2,
        },
      });
    } finally {
      logs.restore();
    }
    expect(await mailboxRow(inst, `effect:${effectId}:completed`)).toEqual({ state: 'pending', attempts: 0 });
  });

  it('shape_versions.state: actor state written at a newer version is refused before the handler runs', async () => {
    const inst = await newInstance(pool, 'shapes-v2');
    const row = await loadInstance(pool, inst);
    await withTx(pool, { budgetMs: 5000 }, (tx) =>
      commitActor(
        tx,
        {
          instanceId: inst,
          expectedRevision: row!.revision,
          state: withShapeVersion({ n: 1 }, 2),
          effects: [],
        },
        config,
      ),
    );
    const key = uid('m');
    await enqueueMessage(pool, inst, key, {});
    const logs = captureLogLines({ quiet: true });
    try {
      await expect(drainInstance(pool, registry, inst, config)).rejects.toMatchObject({
        details: { reason: 'shape_version_unsupported', shape: 'shapes-v2 state', version: 2, known: 1 },
      });
    } finally {
      logs.restore();
    }
    expect(handled.some((h) => h.key === key)).toBe(false);
    expect(await mailboxRow(inst, key)).toEqual({ state: 'pending', attempts: 0 });
  });

  it('shape_versions.effect_args: arguments of a newer version are never run; version 1 runs', async () => {
    const inst = await newInstance(pool);
    const [current, newer] = await emit(pool, inst, [
      { kind: 'shapes.exec', args: { to: 'first release' } },
      { kind: 'shapes.exec', args: withShapeVersion({ to: 'newer release' }, 2) },
    ]);
    const proc = await registerProcess(pool, 'shapes');
    const logs = captureLogLines({ quiet: true });
    try {
      expect(await runClaimedEffects(pool, registry, proc, { limit: 10, instanceId: inst })).toMatchObject({
        claimed: 2,
        completed: 1,
        failed: 1,
      });
    } finally {
      logs.restore();
    }
    expect(ran).toEqual([{ to: 'first release' }]);
    expect(await effectRow(pool, current!.effectId)).toMatchObject({ status: 'completed' });
    expect(await effectRow(pool, newer!.effectId)).toMatchObject({
      status: 'pending',
      attempts: 1,
      last_error: expect.stringMatching(/shape version 2; this release reads up to 1/),
    });
    expect(logs.lines.filter((l) => l.event === 'shape_version_refused')).toHaveLength(1);
  });
});
