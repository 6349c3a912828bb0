import { env } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { enqueueMessage, ensureInstance } from '../../workers/effects/mailbox';
import { registerProcess, releaseProcess } from '../../workers/effects/processes';
import { effectRegistry } from '../../workers/effects/registry';
import { testPool, uid } from '../helpers/db';
import { claimOf, emit, newInstance } from './helpers';

// Each message becomes one effect, run by the host's own process.
effectRegistry
  .registerActor<{ n: number }>({
    type: 'bookkeeping-test',
    initialState: () => ({ n: 0 }),
    handle(event, s, ctx) {
      if (event.type === 'message' && !event.key.startsWith('effect:')) ctx.emit('bookkeeping.run', {});
      return { n: (s?.n ?? 0) + 1 };
    },
  })
  .registerEffect({ kind: 'bookkeeping.run', run: async () => ({ ok: true }) });

const pool = testPool();
afterAll(() => pool.end());

const processRows = async () =>
  Number(
    (await pool.query("select count(*)::int as n from effect_processes where role = 'actor-host'")).rows[0].n,
  );

describe('spec: process bookkeeping stays bounded', () => {
  it('an actor host that has run its effects leaves no process row behind: rows track work in flight, not conversations seen', async () => {
    for (let i = 0; i < 5; i++) {
      const inst = await ensureInstance(pool, 'bookkeeping-test', uid('c'));
      await withTx(pool, { budgetMs: 5000 }, (tx) => enqueueMessage(tx, inst, 'in:1', i));
      expect(await actorHostStub(env, inst).wake(inst)).toMatchObject({
        handled: 1,
        claimed: 1,
        completed: 1,
      });
    }
    expect(await processRows()).toBe(0);
  });

  it('releasing a process that still owns an effect only stops it: the heartbeat evidence stays for recovery', async () => {
    const inst = await newInstance(pool, 'bookkeeping');
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'replace' } } }]);
    const owner = await registerProcess(pool, 'bookkeeping');
    await claimOf(pool, owner, inst);
    const before = (await pool.query('select heartbeat_at_ms from effect_processes where id = $1', [owner]))
      .rows[0];
    expect(await releaseProcess(pool, owner)).toBe('stopped');
    const after = (
      await pool.query('select heartbeat_at_ms, stopped_at_ms from effect_processes where id = $1', [owner])
    ).rows[0];
    expect(after).toMatchObject({
      heartbeat_at_ms: before.heartbeat_at_ms,
      stopped_at_ms: expect.any(String),
    });
    expect((await pool.query('select locked_by from effects where id = $1', [h!.effectId])).rows[0]).toEqual({
      locked_by: owner,
    });
  });

  it('releasing a process that owns nothing deletes it', async () => {
    const idle = await registerProcess(pool, 'bookkeeping');
    expect(await releaseProcess(pool, idle)).toBe('deleted');
    expect((await pool.query('select 1 from effect_processes where id = $1', [idle])).rowCount).toBe(0);
  });
});
