import { afterAll, describe, expect, it } from 'vitest';
import { statusOf } from '../../clients/mobile/src';
import { testPool } from '../helpers/db';
import { reactions, seedWorld } from '../reaction-tickets/helpers';
import { device, ISSUE, serverRows, WRITE } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

describe('replay through the ticket contract', () => {
  it('a lost write response is replayed with the same operation and applies once', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('PUT', WRITE, 'lose-response');
    const entry = await d.client.choose({ messageId, emoji: '👍', desired: 'present' });

    await d.client.sync();
    expect(statusOf(entry)).toBe('unconfirmed'); // the server applied it; the app does not know
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });

    d.clock.advance(1000);
    await d.client.sync();
    expect(entry.terminal?.outcome).toBe('applied');
    expect(entry.terminal?.receipt?.operationId).toBe(entry.operationId);
    expect(entry.terminal?.reflected).toBe('present');
    // One ticket, one receipt, one reaction: the replay reused the operation ID and ticket.
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
    expect((await reactions(token, messageId)).body.reactions).toEqual([
      { emoji: '👍', count: 1, actorIds: [actorId] },
    ]);
    expect(d.network.count('POST', ISSUE)).toBe(1);
  });

  it('a lost issuance response gets the same ticket back, never a second operation', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('POST', ISSUE, 'lose-response');
    const entry = await d.client.choose({ messageId, emoji: '🔥', desired: 'present' });
    await d.client.sync();
    expect(entry.ticket).toBeNull();
    expect(entry.issueSent).toBe(true);
    d.clock.advance(1000);
    await d.client.sync();
    expect(entry.terminal?.outcome).toBe('applied');
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
  });

  it('network errors and 5xx back off on the injected clock; nothing is sent before it is due', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('PUT', WRITE, 'drop-request');
    d.network.fault('PUT', WRITE, 'bad-gateway');
    const entry = await d.client.choose({ messageId, emoji: '🚀', desired: 'present' });

    await d.client.sync(); // issue ok, write: network error
    expect(entry.attempts).toBe(1);
    expect(entry.nextAttemptAt - d.clock.now()).toBe(1000);
    const sent = d.network.log.length;
    await d.client.sync(); // not due yet
    expect(d.network.log.length).toBe(sent);

    d.clock.advance(1000);
    await d.client.sync(); // write: 502 from an intermediary, backoff doubles
    expect(entry.lastError).toBe('http_status');
    expect(entry.nextAttemptAt - d.clock.now()).toBe(2000);
    d.clock.advance(1999);
    await d.client.sync();
    expect(entry.terminal).toBeNull();
    d.clock.advance(1);
    await d.client.sync();
    expect(entry.terminal?.outcome).toBe('applied');
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
  });

  it('a request timeout is an unknown outcome: the intent is kept and replayed', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    const hung = d.network.fault('PUT', WRITE, 'hang-after-server');
    const entry = await d.client.choose({ messageId, emoji: '👀', desired: 'present' });
    const pass = d.client.sync();
    await hung; // the server applied the write; its answer never comes
    expect(d.clock.pending()).toBe(1); // the request timeout
    d.clock.advance(10_000);
    await pass;
    expect(entry.lastError).toBe('timeout');
    expect(statusOf(entry)).toBe('unconfirmed');
    d.clock.advance(1000);
    await d.client.sync();
    expect(entry.terminal?.outcome).toBe('applied');
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
  });

  it('an app restart in the middle of a replay resumes it from the journal and applies once', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const first = device();
    await first.client.signIn({ actorId, token });
    // The write reaches the server, then the app is killed while waiting for the answer.
    const hung = first.network.fault('PUT', WRITE, 'hang-after-server');
    const chosen = await first.client.choose({ messageId, emoji: '✅', desired: 'present' });
    void first.client.sync();
    await hung;
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });

    const second = device({ storage: first.storage });
    await second.client.signIn({ actorId, token });
    const [resumed] = await second.client.entries();
    expect(resumed).toMatchObject({ operationId: chosen.operationId, writeSent: true, terminal: null });
    await second.client.sync();
    const [done] = await second.client.entries();
    expect(done!.terminal?.outcome).toBe('applied');
    expect(second.network.count('POST', ISSUE)).toBe(0); // the persisted ticket was reused
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
  });

  it('an app restart before the write left resumes with the persisted ticket', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const first = device();
    await first.client.signIn({ actorId, token });
    const parked = first.network.fault('PUT', WRITE, 'hang-before-server');
    await first.client.choose({ messageId, emoji: '🎯', desired: 'present' });
    void first.client.sync();
    await parked;
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 0, fences: 0 });

    const second = device({ storage: first.storage });
    await second.client.signIn({ actorId, token });
    await second.client.sync();
    const [done] = await second.client.entries();
    expect(done!.terminal?.outcome).toBe('applied');
    expect(second.network.count('POST', ISSUE)).toBe(0); // the persisted ticket was used
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
  });
});
