import { afterAll, describe, expect, it } from 'vitest';
import { recoveryFor } from '../../clients/mobile/src';
import { testPool } from '../helpers/db';
import { put, reactions, seedWorld } from '../reaction-tickets/helpers';
import { device, ISSUE, RETIRE, serverRows, WRITE } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

describe('a newer choice made offline wins over an older queued one', () => {
  it('an older choice with a ticket is retired through the contract before the newer one is written', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('PUT', WRITE, 'drop-request');
    const older = await d.client.choose({ messageId, emoji: '👍', desired: 'present' });
    await d.client.sync(); // ticket issued, write lost on the way
    d.network.offline = true;
    const newer = await d.client.choose({ messageId, emoji: '👍️', desired: 'absent' }); // same reaction
    expect(older.supersededBy).toBe(newer.operationId);
    await d.client.sync();

    d.network.offline = false;
    d.clock.advance(60_000);
    await d.client.sync();
    expect(older.terminal).toMatchObject({ outcome: 'superseded' });
    expect(newer.terminal).toMatchObject({ outcome: 'applied', reflected: 'absent' });
    expect(d.network.log.filter((l) => !l.startsWith('POST /v1/reaction-tickets'))).toEqual([
      `PUT /v1/reaction-operations/${older.operationId}`,
      `POST /v1/reaction-operations/${older.operationId}/retire`,
      `PUT /v1/reaction-operations/${newer.operationId}`,
    ]);
    // The older request, delayed in the network, arrives now: the fence refuses it.
    const delayed = await put(token, older.operationId, older.ticket!.token, older.intent);
    expect(delayed.status).toBe(409);
    expect(delayed.body.error.code).toBe('operation_retired');
    expect((await reactions(token, messageId)).body.reactions).toEqual([]);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 2, receipts: 1, fences: 1 });
    expect(recoveryFor(older, 'vi')?.title).toBe('Đã thay bằng lựa chọn mới hơn');
  });

  it('an older choice that applied with a lost answer is answered by its receipt, then the newer applies', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('PUT', WRITE, 'lose-response');
    const older = await d.client.choose({ messageId, emoji: '❤️', desired: 'present' });
    await d.client.sync(); // applied on the server, answer lost
    d.network.offline = true;
    const newer = await d.client.choose({ messageId, emoji: '❤️', desired: 'absent' });
    d.network.offline = false;
    d.clock.advance(60_000);
    await d.client.sync();
    expect(older.terminal).toMatchObject({ outcome: 'superseded' });
    expect(older.terminal?.receipt?.operationId).toBe(older.operationId); // it did apply; never hidden
    expect(newer.terminal).toMatchObject({ outcome: 'applied', reflected: 'absent' });
    expect(newer.terminal?.receipt?.outcome).toBe('removed');
    expect((await reactions(token, messageId)).body.reactions).toEqual([]);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 2, receipts: 2, fences: 0 });
  });

  it('an older choice that never left the device ends locally; only the newest is sent', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.offline = true;
    const a = await d.client.choose({ messageId, emoji: '🎉', desired: 'present' });
    const b = await d.client.choose({ messageId, emoji: '🎉', desired: 'absent' });
    const c = await d.client.choose({ messageId, emoji: '🎉', desired: 'present' });
    await d.client.sync();
    d.network.offline = false;
    d.clock.advance(60_000);
    await d.client.sync();
    expect([a, b, c].map((e) => e.terminal?.outcome)).toEqual(['superseded', 'superseded', 'applied']);
    expect(d.network.count('POST', ISSUE)).toBe(1);
    expect(d.network.count('POST', RETIRE)).toBe(0);
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
    expect((await reactions(token, messageId)).body.reactions).toEqual([
      { emoji: '🎉', count: 1, actorIds: [actorId] },
    ]);
  });

  it('an older choice whose issuance answer was lost is issued again only to be retired', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('POST', ISSUE, 'lose-response');
    const older = await d.client.choose({ messageId, emoji: '😮', desired: 'present' });
    await d.client.sync();
    const newer = await d.client.choose({ messageId, emoji: '😮', desired: 'absent' });
    d.clock.advance(60_000);
    await d.client.sync();
    expect(older.terminal?.outcome).toBe('superseded');
    expect(newer.terminal?.outcome).toBe('applied');
    // The server-side ticket of the older choice got its retirement fence (and its quota lease back).
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 2, receipts: 1, fences: 1 });
  });
});
