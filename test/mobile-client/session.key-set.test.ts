import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { statusOf } from '../../clients/mobile/src';
import { testPool } from '../helpers/db';
import { startJwksServer } from '../helpers/jwks';
import { reactions, seedWorld } from '../reaction-tickets/helpers';
import { device, Network, serverRows } from './helpers';

const pool = testPool();
afterAll(() => pool.end());
afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

describe('the identity provider key set is down: the app retries, it does not sign out', () => {
  it('503 with Retry-After from a key-set failure backs off with the session kept, then applies once', async () => {
    // The Worker holds a failed key-set fetch for its Retry-After on its own clock (Date, faked
    // here), so the device's clock and the Worker's move together.
    vi.useFakeTimers({ toFake: ['Date'] });
    const w = await seedWorld();
    const [actorId, messageId] = [w.actors[0]!, w.messages[0]!];
    const keys = await startJwksServer();
    const d = device({ network: new Network(keys.bindings) });
    const advance = (ms: number) => {
      d.clock.advance(ms);
      vi.setSystemTime(Date.now() + ms);
    };
    const token = await keys.sign(actorId);
    await d.client.signIn({ actorId, token });
    keys.state.mode = 'http-503';
    const entry = await d.client.choose({ messageId, emoji: '👍', desired: 'present' });

    const report = await d.client.sync();
    expect(report.session).toBe('active');
    expect(d.client.sessionState).toBe('active');
    expect(entry).toMatchObject({ terminal: null, lastError: 'service_unavailable', attempts: 1 });
    expect(statusOf(entry)).toBe('queued');
    // Retry-After (5 s) is honoured over the 1 s backoff: nothing is sent before it.
    expect(entry.nextAttemptAt - d.clock.now()).toBe(5000);
    const sent = d.network.served.length;
    advance(4999);
    await d.client.sync();
    expect(d.network.served.length).toBe(sent);

    keys.state.mode = 'up';
    advance(1);
    await d.client.sync();
    expect(entry.terminal).toMatchObject({ outcome: 'applied', reflected: 'present' });
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
    expect((await reactions(w.tokens[0]!, messageId)).body.reactions).toEqual([
      { emoji: '👍', count: 1, actorIds: [actorId] },
    ]);
  });
});
