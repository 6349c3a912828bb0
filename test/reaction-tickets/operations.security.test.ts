import { afterAll, describe, expect, it } from 'vitest';
import { testPool } from '../helpers/db';
import { call, opId, put, reactions, retire, seedWorld, snapshot, ticketFor } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

describe('PUT /v1/reaction-operations/:operationId', () => {
  it('applies the desired state and a replay returns the same receipt without a second change', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '👍', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    const first = await put(token, op, ticket, intent);
    expect(first.status).toBe(200);
    expect(first.body.receipt).toMatchObject({ operationId: op, outcome: 'added', reactionVersion: 1 });
    expect(first.body.replayed).toBe(false);
    const replay = await put(token, op, ticket, intent);
    expect(replay.status).toBe(200);
    expect(replay.body.receipt).toEqual(first.body.receipt);
    expect(replay.body.replayed).toBe(true);
    expect((await reactions(token, message)).body).toEqual({
      messageId: message,
      reactionVersion: 1,
      reactions: [{ emoji: '👍', count: 1, actorIds: [actor] }],
    });
    expect((await snapshot(pool, message, actor)).receipts).toBe(1);
  });

  it('an intent that differs from the ticket is 409 intent_mismatch and changes nothing', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '👍', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    const before = await snapshot(pool, message, actor);
    for (const wrong of [
      { ...intent, desired: 'absent' as const },
      { ...intent, emoji: '👎' },
    ]) {
      const res = await put(token, op, ticket, wrong);
      expect(res.status).toBe(409);
      expect(res.body.error.code).toBe('intent_mismatch');
    }
    expect(await snapshot(pool, message, actor)).toEqual(before);
  });

  it('forged, foreign and re-targeted tickets and unissued operation IDs are refused without mutating', async () => {
    const w = await seedWorld(2);
    const [a, b] = w.actors as [string, string];
    const [ta, tb] = w.tokens as [string, string];
    const message = w.messages[0]!;
    const intent = { messageId: message, emoji: '👍', desired: 'present' as const };
    const opA = opId();
    const ticketA = await ticketFor(ta, opA, intent);
    const before = [await snapshot(pool, message, a), await snapshot(pool, message, b)];
    const parts = ticketA.split('.');
    // One full base64url character of the MAC changed: always other bytes. (Overwriting the
    // tail with 'AA' left the MAC as it was whenever its last 10 bits were zero, about one
    // run in a thousand, and the "forged" ticket was then simply valid.)
    const mac = parts[3]!;
    const forgedMac = [
      ...parts.slice(0, 3),
      `${mac.slice(0, 5)}${mac[5] === 'A' ? 'B' : 'A'}${mac.slice(6)}`,
    ].join('.');
    const forgedId = [parts[0], parts[1], crypto.randomUUID(), parts[3]].join('.');
    const cases = [
      put(ta, opA, forgedMac, intent), // MAC does not verify
      put(ta, opA, forgedId, intent), // another ID under a copied MAC
      put(ta, opA, 'not-a-ticket', intent),
      put(tb, opA, ticketA, intent), // a foreign ticket, same operation ID
      put(tb, opId(), ticketA, intent), // a foreign ticket, another operation ID
      put(ta, opId(), ticketA, intent), // re-targeted to an unissued operation ID
      retire(tb, opA, ticketA),
      retire(ta, opId(), ticketA),
    ];
    for (const res of await Promise.all(cases)) {
      expect(res.status, JSON.stringify(res.body)).toBe(403);
      expect(res.body.error.code).toBe('ticket_invalid');
    }
    expect([await snapshot(pool, message, a), await snapshot(pool, message, b)]).toEqual(before);
  });

  it('a member removed from the conversation gets 404 with a valid ticket', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '👍', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    await call('POST', `/admin/conversations/${w.conversationId}/members`, {
      admin: true,
      body: { remove: [actor] },
    });
    const before = await snapshot(pool, message, actor);
    expect((await put(token, op, ticket, intent)).status).toBe(404);
    expect((await reactions(token, message)).status).toBe(404);
    expect(await snapshot(pool, message, actor)).toEqual(before);
  });

  it('malformed write bodies are 4xx and write nothing', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const ticket = await ticketFor(token, op, { messageId: message, emoji: '👍', desired: 'present' });
    const before = await snapshot(pool, message, actor);
    for (const opts of [
      { rawBody: '[' },
      { body: { ticket, messageId: message, emoji: '👍' } },
      { body: { ticket, messageId: message, emoji: '👍', desired: 'present', sneaky: true } },
      { body: { ticket: 42, messageId: message, emoji: '👍', desired: 'present' } },
    ]) {
      const res = await call('PUT', `/v1/reaction-operations/${op}`, { token, ...opts });
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
    }
    const badId = await call('PUT', '/v1/reaction-operations/x', {
      token,
      body: { ticket, messageId: message, emoji: '👍', desired: 'present' },
    });
    expect(badId.status).toBe(400);
    expect(await snapshot(pool, message, actor)).toEqual(before);
  });
});

describe('POST /v1/reaction-operations/:operationId/retire', () => {
  it('a retired operation can never apply; retiring an applied one returns its receipt', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '🐢', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    const retired = await retire(token, op, ticket);
    expect(retired.status).toBe(200);
    expect(retired.body.status).toBe('retired');
    expect((await retire(token, op, ticket)).body.retiredAt).toBe(retired.body.retiredAt);
    const before = await snapshot(pool, message, actor);
    const late = await put(token, op, ticket, intent);
    expect(late.status).toBe(409);
    expect(late.body.error.code).toBe('operation_retired');
    expect(late.body.error.details.message.reactions).toEqual([]);
    expect(await snapshot(pool, message, actor)).toEqual(before);

    const applied = opId();
    const t2 = await ticketFor(token, applied, intent);
    const receipt = (await put(token, applied, t2, intent)).body.receipt;
    const r = await retire(token, applied, t2);
    expect(r.body).toMatchObject({ status: 'applied', receipt });
  });
});

describe('GET reactions and the web toggle', () => {
  it('the web toggle is a separate path: it flips the reaction and writes no receipt', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const toggle = () =>
      call('POST', `/v1/messages/${message}/reactions/toggle`, { token, body: { emoji: '⭐' } });
    const on = await toggle();
    expect(on.status).toBe(200);
    expect(on.body.outcome).toBe('added');
    expect(on.body.message.reactions).toEqual([{ emoji: '⭐', count: 1, actorIds: [actor] }]);
    const off = await toggle();
    expect(off.body.outcome).toBe('removed');
    expect(off.body.message).toEqual({ messageId: message, reactionVersion: 2, reactions: [] });
    const snap = await snapshot(pool, message, actor);
    expect([snap.receipts, snap.fences]).toEqual([0, 0]);
    expect(
      (
        await call('POST', `/v1/messages/${message}/reactions/toggle`, {
          token: w.outsiderToken,
          body: { emoji: '⭐' },
        })
      ).status,
    ).toBe(404);
  });

  it('serves the OpenAPI document of the /v1 API with the one error shape', async () => {
    const res = await call('GET', '/v1/openapi.json');
    expect(res.status).toBe(200);
    expect(Object.keys(res.body.paths)).toEqual(
      expect.arrayContaining([
        '/v1/reaction-tickets',
        '/v1/reaction-operations/{operationId}',
        '/v1/reaction-operations/{operationId}/retire',
        '/v1/messages/{messageId}/reactions',
        '/v1/messages/{messageId}/reactions/toggle',
      ]),
    );
    // The one error shape, with the codes of each route and status (openapi.errors.test.ts).
    const gone = res.body.paths['/v1/reaction-operations/{operationId}'].put.responses['410'];
    expect(Object.keys(gone.content['application/json'].schema.properties.error.properties)).toEqual([
      'code',
      'message',
      'requestId',
      'details',
    ]);
    expect(gone.content['application/json'].schema.properties.error.properties.code.enum).toEqual([
      'operation_expired',
      'operation_outcome_unknown',
    ]);
  });
});
