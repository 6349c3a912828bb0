import { env } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { recoveryFor } from '../../clients/mobile/src';
import { testPool } from '../helpers/db';
import { call, seedWorld } from '../reaction-tickets/helpers';
import { device, ISSUE, Network, serverRows, WRITE } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

describe('terminal states other than expiry', () => {
  it('permission loss (removed from the conversation) is terminal, with a localized message', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('PUT', WRITE, 'drop-request');
    const entry = await d.client.choose({ messageId, emoji: '👋', desired: 'present' });
    await d.client.sync();
    await call('POST', `/admin/conversations/${w.conversationId}/members`, {
      admin: true,
      body: { remove: [actorId] },
    });
    d.clock.advance(60_000);
    await d.client.sync();
    expect(entry.terminal).toMatchObject({
      outcome: 'permission_lost',
      code: 'not_found',
      message: null,
      reflected: 'unknown',
    });
    expect(recoveryFor(entry, 'en')).toMatchObject({ kind: 'permission_lost', action: 'dismiss' });
    expect(recoveryFor(entry, 'vi')?.body).toContain('không còn quyền truy cập');
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 0, fences: 0 });
    // The user acknowledges it; only then does it leave the journal.
    expect(await d.client.dismiss(entry.operationId)).toBe(true);
    expect(await d.client.entries()).toEqual([]);
  });

  it('a replay of an applied write after its ticket key version was removed: unknown with the truth, never "not accepted"', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device();
    await d.client.signIn({ actorId, token });
    d.network.fault('PUT', WRITE, 'lose-response');
    const entry = await d.client.choose({ messageId, emoji: '🔑', desired: 'present' });
    await d.client.sync(); // applied on the server, the answer lost
    expect(entry.ticket?.token).toMatch(/^rt1\.2\./);
    // The operator removes key version 2 (the one the ticket is signed under).
    const keys = JSON.parse(env.SECRET_KEYS as unknown as string) as Record<string, string>;
    d.network.bindings = { SECRET_KEYS: JSON.stringify({ '1': keys['1'] }) };
    d.clock.advance(60_000);
    await d.client.sync();
    expect(entry.terminal).toMatchObject({
      outcome: 'unknown',
      code: 'ticket_invalid',
      reflected: 'present',
    });
    for (const locale of ['en', 'vi']) {
      const text = recoveryFor(entry, locale)!;
      expect(text.kind).toBe('unknown');
      expect(text.body).not.toMatch(/did not accept|không chấp nhận/);
    }
    expect(recoveryFor(entry, 'en')!.body).toContain('currently shows your 🔑 reaction');
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
  });

  it('quota refusals wait Retry-After, then end as `quota` with a retry that reuses the operation ID', async () => {
    const w = await seedWorld();
    const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const d = device({ network: new Network({ REACTION_TICKET_MAX_OUTSTANDING: '1' }) });
    await d.client.signIn({ actorId, token });
    d.network.fault('PUT', WRITE, 'drop-request');
    const holder = await d.client.choose({ messageId, emoji: '1️⃣', desired: 'present' });
    await d.client.sync(); // holder: ticket outstanding (its write did not arrive)
    d.clock.advance(60_000);
    const waiting = await d.client.choose({ messageId, emoji: '2️⃣', desired: 'present' });
    // Keep the holder outstanding: its writes keep failing in the network.
    for (let i = 0; i < 5; i++) d.network.fault('PUT', WRITE, 'drop-request');
    for (let i = 0; i < 3; i++) {
      await d.client.sync();
      if (waiting.terminal) break;
      expect(waiting.lastError).toBe('quota_exceeded');
      expect(waiting.nextAttemptAt).toBeGreaterThan(d.clock.now());
      d.clock.advance(waiting.nextAttemptAt - d.clock.now());
    }
    expect(waiting.terminal).toMatchObject({ outcome: 'quota', code: 'quota_exceeded' });
    expect(recoveryFor(waiting, 'vi')).toMatchObject({
      kind: 'quota',
      action: 'retry',
      actionLabel: 'Thử lại',
    });

    // The holder applies (freeing its slot); the user taps "Try again": same operation ID.
    d.network.clearFaults();
    d.clock.advance(10 * 60_000);
    await d.client.sync();
    expect(holder.terminal?.outcome).toBe('applied');
    expect(await d.client.retryQuota(waiting.operationId)).toBe(true);
    await d.client.sync();
    const [, again] = await d.client.entries();
    expect(again).toMatchObject({ operationId: waiting.operationId, terminal: { outcome: 'applied' } });
    expect(await serverRows(pool, actorId)).toEqual({ tickets: 2, receipts: 2, fences: 0 });
    expect(d.network.count('POST', ISSUE)).toBeGreaterThanOrEqual(4);
  });
});
