import { afterAll, describe, expect, it } from 'vitest';
import { getLegacyContractStatus } from '../../workers/reaction-tickets/contract';
import { backendPid, testPool, waitUntilBlocked } from '../helpers/db';
import { blockedBy, call, opId, PATIENT, put, retire, seedWorld, snapshot, ticketFor } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

const close = () => call('POST', '/admin/reaction-contract/legacy/close', { admin: true });

// This file's database starts with the contract open; closing is one-way, so the open-contract
// tests come first and every later test closes it itself (a no-op once closed).
describe('legacy unbounded desired-state contract', () => {
  it('while open, old clients write without a ticket and retire arbitrary IDs', async () => {
    const w = await seedWorld();
    const [token, message] = [w.tokens[0]!, w.messages[0]!];
    const intent = { messageId: message, emoji: '🦖', desired: 'present' as const };
    const op = opId();
    const first = await put(token, op, undefined, intent);
    expect(first.status).toBe(200);
    expect(first.body.receipt).toMatchObject({ contract: 'legacy', outcome: 'added' });
    expect((await put(token, op, undefined, intent)).body.receipt).toEqual(first.body.receipt);
    const arbitrary = await retire(token, 'arbitrary-retirement-id-1');
    expect(arbitrary.status).toBe(200);
    expect(arbitrary.body.status).toBe('retired');
    expect((await getLegacyContractStatus(pool)).open).toBe(true);
  });

  it('the legacy path cannot bypass a ticket: a ticketed operation ID needs its ticket', async () => {
    const w = await seedWorld();
    const intent = { messageId: w.messages[0]!, emoji: '🎫', desired: 'present' as const };
    const op = opId();
    await ticketFor(w.tokens[0]!, op, intent);
    const before = await snapshot(pool, w.messages[0]!, w.actors[0]!);
    const res = await put(w.tokens[0]!, op, undefined, intent);
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('ticket_required');
    expect((await retire(w.tokens[0]!, op)).body.error.code).toBe('ticket_required');
    expect(await snapshot(pool, w.messages[0]!, w.actors[0]!)).toEqual(before);
  });

  it('closing waits for admitted legacy transactions to drain and records it', async () => {
    // An admitted legacy transaction holds the contract row FOR SHARE until it ends.
    const inflight = await pool.connect();
    try {
      await inflight.query('begin');
      await inflight.query(
        "select 1 from private.write_contract_state where contract = 'legacy_desired_state' for share",
      );
      const closing = call('POST', '/admin/reaction-contract/legacy/close', { admin: true, env: PATIENT });
      const closer = await blockedBy(pool, await backendPid(inflight));
      await waitUntilBlocked(pool, closer);
      expect((await getLegacyContractStatus(pool)).open).toBe(true);
      await inflight.query('commit');
      const closed = await closing;
      expect(closed.status).toBe(200);
      expect(closed.body).toMatchObject({ open: false, admittedAfterClose: 0, closedAndDrained: true });
    } finally {
      inflight.release();
    }
    const status = await getLegacyContractStatus(pool);
    expect(status.closedAndDrained).toBe(true);
    expect(status.drainedAt).toEqual(status.closedAt);
    const admin = await call('GET', '/admin/reaction-contract', { admin: true });
    expect(admin.body.closedAndDrained).toBe(true);
  });

  it('once closed, old clients and arbitrary retirement IDs fail closed with a stable code', async () => {
    expect((await close()).status).toBe(200);
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const before = await snapshot(pool, message, actor);
    const write = await put(token, opId(), undefined, {
      messageId: message,
      emoji: '🦕',
      desired: 'present',
    });
    expect(write.status).toBe(426);
    expect(write.body.error.code).toBe('legacy_contract_closed');
    const arbitrary = await retire(token, 'arbitrary-retirement-id-2');
    expect(arbitrary.status).toBe(426);
    expect(arbitrary.body.error.code).toBe('legacy_contract_closed');
    expect(await snapshot(pool, message, actor)).toEqual(before);
    // The ticketed contract keeps working.
    const op = opId();
    const intent = { messageId: message, emoji: '🦕', desired: 'present' as const };
    expect((await put(token, op, await ticketFor(token, op, intent), intent)).status).toBe(200);
    expect((await getLegacyContractStatus(pool)).admittedAfterClose).toBe(0);
  });

  it('closing again is a no-op that keeps the first close', async () => {
    const first = await close();
    expect(first.status).toBe(200);
    const again = await close();
    expect(again.body.closedAt).toBe(first.body.closedAt);
  });

  it('the close is one-way: a rollback cannot reopen the unbounded path, whatever the session sets', async () => {
    expect((await close()).status).toBe(200);
    const client = await pool.connect();
    try {
      await client.query('begin');
      // The setting that used to reopen it in test databases (before the one-way trigger).
      await client.query("set local app.test_clock = 'on'");
      await expect(
        client.query('update private.write_contract_state set closed_at = null, drained_at = null'),
      ).rejects.toMatchObject({ code: '55000' });
      await client.query('rollback');
    } finally {
      client.release();
    }
    expect((await getLegacyContractStatus(pool)).closedAndDrained).toBe(true);
  });
});
