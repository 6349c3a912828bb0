import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testPool } from '../helpers/db';
import { changedTables, tableSums } from '../helpers/tables';
import { call, issue, opId, seedWorld, type World } from './helpers';

/**
 * Issue 16 item 2 on /v1: an emoji Postgres cannot store is refused at the schema (400), not
 * silently stored as U+FFFD (a ticket bound to an emoji no later write could match).
 */
const pool = testPool(2);
afterAll(() => pool.end());

let world: World;
beforeAll(async () => {
  world = await seedWorld(1, 1);
}, 60_000);

describe('/v1 refuses an emoji Postgres cannot store, writing nothing', () => {
  for (const [what, emoji] of [
    ['a lone high surrogate', '\ud83d'],
    ['a lone low surrogate after text', 'x\udc4d'],
    ['U+0000', 'a\u0000'],
  ] as const)
    it(`${what} → 400 validation_failed on issue and toggle`, async () => {
      const before = await tableSums(pool);
      const issued = await issue(world.tokens[0]!, opId(), {
        messageId: world.messages[0]!,
        emoji,
        desired: 'present',
      });
      expect({ status: issued.status, code: issued.body?.error?.code }).toEqual({
        status: 400,
        code: 'validation_failed',
      });
      const toggled = await call('POST', `/v1/messages/${world.messages[0]}/reactions/toggle`, {
        token: world.tokens[0],
        body: { emoji },
      });
      expect({ status: toggled.status, code: toggled.body?.error?.code }).toEqual({
        status: 400,
        code: 'validation_failed',
      });
      expect(changedTables(before, await tableSums(pool))).toEqual([]);
    });

  it('a real emoji still works (positive control)', async () => {
    const res = await issue(world.tokens[0]!, opId(), {
      messageId: world.messages[0]!,
      emoji: '👍',
      desired: 'present',
    });
    expect(res.status).toBe(201);
  });
});
