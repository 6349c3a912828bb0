import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testPool, uid } from '../helpers/db';
import { changedTables, tableSums } from '../helpers/tables';
import { call, seedWorld, type World } from './helpers';

/**
 * Issue 16 item 2: text Postgres cannot store (U+0000, a lone surrogate) and ids that name
 * nothing are the caller's mistake: a 4xx with a stable code, and not one row written.
 */
const pool = testPool(2);
afterAll(() => pool.end());

let world: World;
beforeAll(async () => {
  world = await seedWorld(1, 1);
}, 60_000);

const UNSTORABLE = { nul: 'a\u0000b', 'lone high surrogate': 'a\ud800b', 'lone low surrogate': '\udc00' };

async function expectRefusedUnwritten(
  method: string,
  path: string,
  body: unknown,
  status: number,
  code: string,
): Promise<void> {
  const before = await tableSums(pool);
  const res = await call(method, path, { admin: true, body });
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status, code });
  expect(changedTables(before, await tableSums(pool))).toEqual([]);
}

describe('admin directory upserts refuse text Postgres cannot store, writing nothing', () => {
  for (const [what, text] of Object.entries(UNSTORABLE)) {
    it(`${what} in a workspace name, actor name, conversation title or message body → 400 validation_failed`, async () => {
      const { workspaceId, conversationId, actors } = world;
      await expectRefusedUnwritten(
        'PUT',
        `/admin/workspaces/${uid('ws')}`,
        { name: text },
        400,
        'validation_failed',
      );
      await expectRefusedUnwritten(
        'PUT',
        `/admin/actors/${uid('actor')}`,
        { workspaceId, displayName: text },
        400,
        'validation_failed',
      );
      await expectRefusedUnwritten(
        'PUT',
        `/admin/conversations/${uid('conv')}`,
        { workspaceId, title: text },
        400,
        'validation_failed',
      );
      await expectRefusedUnwritten(
        'PUT',
        `/admin/messages/${uid('msg')}`,
        { conversationId, authorActorId: actors[0], body: text },
        400,
        'validation_failed',
      );
    });
  }

  it('the refusal names the field, never the value', async () => {
    const res = await call('PUT', `/admin/workspaces/${uid('ws')}`, {
      admin: true,
      body: { name: 'x\u0000y' },
    });
    expect(res.body.error.details).toEqual([{ path: ['name'], message: expect.any(String) }]);
    expect(JSON.stringify(res.body)).not.toContain('x\\u0000y');
  });
});

describe('admin directory upserts refuse ids that name nothing, writing nothing', () => {
  it('an actor or conversation in an unknown workspace → 422 unknown_reference', async () => {
    await expectRefusedUnwritten(
      'PUT',
      `/admin/actors/${uid('actor')}`,
      { workspaceId: uid('nows') },
      422,
      'unknown_reference',
    );
    await expectRefusedUnwritten(
      'PUT',
      `/admin/conversations/${uid('conv')}`,
      { workspaceId: uid('nows') },
      422,
      'unknown_reference',
    );
  });

  it('a message by an unknown author → 422 unknown_reference', async () => {
    await expectRefusedUnwritten(
      'PUT',
      `/admin/messages/${uid('msg')}`,
      { conversationId: world.conversationId, authorActorId: uid('noactor') },
      422,
      'unknown_reference',
    );
  });

  it('the same upserts with existing references still succeed (positive control)', async () => {
    const res = await call('PUT', `/admin/messages/${uid('msg')}`, {
      admin: true,
      body: { conversationId: world.conversationId, authorActorId: world.actors[0], body: 'fine ✓ 👍' },
    });
    expect(res.status).toBe(200);
  });
});
