import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { addTypingBadge, withdrawAfterCommit } from '../../workers/typing-ledger';
import { runRemoteRetry } from '../../workers/typing-ledger/passes/retry';
import { newRowId, sealSnapshot } from '../../workers/typing-ledger/snapshot';
import { testPool, uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { emu } from '../lark/helpers';
import { liveRows, trackWorkspaces } from '../typing-maintenance/helpers';
import { keys, makeInstallation, newMessage, register, registeredId, row, typingOf } from './helpers';

/**
 * Failures that are not Lark's (a bug, our database) must surface as errors, never be
 * counted as a permanent Lark failure. The bug here is a fetch adapter that resolves every
 * body to null: the Lark client's own code then throws a TypeError on the first answer.
 */
const buggyFetch: typeof fetch = async (input, init) => {
  const res = await fetch(input, init);
  await res.body?.cancel();
  return { status: res.status, headers: res.headers, text: async () => null } as unknown as Response;
};

let pool: Pool;
const { track, dropAll } = trackWorkspaces();

beforeAll(() => {
  pool = testPool(8);
});
afterEach(async () => {
  await emu('faults', undefined, 'DELETE');
});
afterAll(async () => {
  await dropAll(pool);
  await pool.end();
});

async function install() {
  const inst = await makeInstallation(pool);
  track(inst.workspaceId);
  return inst;
}

describe('errors that are not Lark failures', () => {
  it('the retry pass counts a TypeError in the Lark call path as an error (logged), not a permanent failure', async () => {
    const inst = await install();
    const [live] = await liveRows(pool, inst, 1);
    const logs = captureLogLines();
    const report = await runRemoteRetry(pool, {
      keys: keys(),
      scope: { workspaceIds: [inst.workspaceId] },
      fetch: buggyFetch,
    }).finally(logs.restore);

    expect(report).toMatchObject({ claimed: 1, cleaned: 0, retryable: 0, permanent: 0, errors: 1 });
    const r = await row(pool, live!.id);
    expect(r.last_error).toBe('retry:error:TypeError');
    expect(r.abandoned_at).toBeNull();
    expect(logs.events('typing_withdraw_error')).toEqual([
      expect.objectContaining({
        level: 'error',
        rowId: live!.id,
        stage: 'retry',
        error: expect.objectContaining({ name: 'TypeError' }),
      }),
    ]);
    expect(logs.events('typing_withdraw_failed')).toEqual([]);
    // Nothing was acknowledged: the badge is still there for the next attempt.
    expect(await typingOf(live!.messageId, inst.appId)).toHaveLength(1);
  });

  it('after commit, a snapshot that opens but makes no client (a bug) is an error, logged, not permanent', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const id = newRowId();
    // Sealed and bound like any snapshot, but without its API host: the client cannot be built.
    const sealed = await sealSnapshot(keys(), id, {
      appId: inst.appId,
      appSecret: inst.appSecret,
      apiBase: undefined as unknown as string,
    });
    await pool.query(
      `insert into channel_typing_reaction
         (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
          context_revision, credential_snapshot, reaction_id, add_state, taskless, settled_at,
          next_attempt_at, expires_at)
       values ($1, $2, $3, $4, $5, $6, 1, 0, $7, 'rid_unknown', 'added', false, app_now(), app_now(),
               app_now() + interval '7 days')`,
      [id, inst.workspaceId, inst.id, inst.appId, uid('s'), messageId, sealed],
    );
    const logs = captureLogLines();
    const out = await withdrawAfterCommit(pool, keys(), [id]).finally(logs.restore);

    expect(out).toEqual({ [id]: 'error' });
    expect((await row(pool, id)).last_error).toBe('withdraw:error:TypeError');
    expect(logs.events('typing_withdraw_error')).toEqual([
      expect.objectContaining({
        rowId: id,
        stage: 'after_commit',
        error: expect.objectContaining({ name: 'TypeError' }),
      }),
    ]);
    expect(logs.events('typing_withdraw_failed')).toEqual([]);
  });

  it('an Add that fails with a TypeError records the badge as uncertain (for the sweeps) and throws', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    await expect(addTypingBadge(pool, reg, { fetch: buggyFetch })).rejects.toBeInstanceOf(TypeError);
    expect((await row(pool, registeredId(reg))).add_state).toBe('uncertain');
  });
});
