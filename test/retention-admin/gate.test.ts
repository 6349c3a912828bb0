import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { setDbClockOffset, testPool } from '../helpers/db';
import {
  opId,
  put,
  reactions,
  reopenLegacyContract,
  retire,
  seedWorld,
  snapshot,
  ticketFor,
} from '../reaction-tickets/helpers';
import {
  cleanupStatus,
  closeLegacyContract,
  currentGeneration,
  DAY_MS,
  enable,
  OPERATOR,
  runOnce,
  scoped,
} from './helpers';

const pool = testPool();
const reopen = () => reopenLegacyContract(pool);
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

// This file's database starts with the contract open, and its owner (in the retention Worker)
// starts disabled. Everything goes through the main Worker's routes and the retention Worker's cron.
describe('prerequisites gate', () => {
  it('a fresh owner starts disabled and its cron tick runs nothing', async () => {
    expect((await cleanupStatus()).enabled).toBe(false);
    expect(await runOnce()).toBeNull();
  });

  it('enabling before the legacy contract is closed and drained is refused with the reason', async () => {
    const res = await scoped('POST', '/admin/retention/enable', {
      generation: await currentGeneration(),
      operator: OPERATOR,
    });
    expect(res.status).toBe(412);
    expect(res.body.error.code).toBe('precondition_failed');
    expect(res.body.error.message).toMatch(/legacy unbounded write contract is still open/);
    expect(res.body.error.details.prerequisites.contract).toMatchObject({
      open: true,
      closedAndDrained: false,
    });
    expect((await cleanupStatus()).enabled).toBe(false);
    expect(await runOnce()).toBeNull();
    expect((await cleanupStatus()).enabled).toBe(false);

    await closeLegacyContract();
    const ok = await scoped('POST', '/admin/retention/enable', {
      generation: await currentGeneration(),
      operator: OPERATOR,
    });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ enabled: true, prerequisites: { satisfied: true } });
  });

  it('a run refuses to delete while the contract is open again (the gate is checked every run)', async () => {
    await closeLegacyContract();
    await enable();
    await reopen();
    expect(await runOnce()).toMatchObject({ outcome: 'prerequisites', batches: 0, rowsDeleted: 0 });
  });
});

describe('after deletion, a delayed request still cannot apply', () => {
  it('a deleted receipt or fence: the ticket expiry rejects the replay through /v1', async () => {
    await closeLegacyContract();
    const w = await seedWorld();
    const [token, message, actor] = [w.tokens[0]!, w.messages[0]!, w.actors[0]!];
    const applied = { messageId: message, emoji: '🧹', desired: 'present' as const };
    const appliedOp = opId();
    const appliedTicket = await ticketFor(token, appliedOp, applied);
    expect((await put(token, appliedOp, appliedTicket, applied)).status).toBe(200);
    const retired = { messageId: message, emoji: '🗑', desired: 'present' as const };
    const retiredOp = opId();
    const retiredTicket = await ticketFor(token, retiredOp, retired);
    expect((await retire(token, retiredOp, retiredTicket)).status).toBe(200);
    // The user removes the reaction later with a new operation.
    const removal = { ...applied, desired: 'absent' as const };
    const removalOp = opId();
    expect((await put(token, removalOp, await ticketFor(token, removalOp, removal), removal)).status).toBe(
      200,
    );

    // 91 days later the cleanup has deleted the receipt and the fence.
    await setDbClockOffset(pool, 91 * DAY_MS);
    const enabled = await scoped('POST', '/admin/retention/enable', {
      generation: await currentGeneration(),
      operator: OPERATOR,
    });
    expect(enabled.status).toBe(200);
    // Two receipts and the fence: this file's only rows, all in one run.
    expect(await runOnce()).toMatchObject({ outcome: 'complete', rowsDeleted: 3 });
    const { rows } = await pool.query(
      `select (select count(*)::int from private.chat_reaction_operations where actor_id = $1) as receipts,
              (select count(*)::int from private.chat_retired_reaction_operations where actor_id = $1) as fences`,
      [actor],
    );
    expect(rows[0]).toEqual({ receipts: 0, fences: 0 });

    const before = await snapshot(pool, message, actor);
    const current = (await reactions(token, message)).body;
    for (const late of [
      await put(token, appliedOp, appliedTicket, applied),
      await put(token, retiredOp, retiredTicket, retired),
      await retire(token, retiredOp, retiredTicket),
    ]) {
      expect(late.status).toBe(410);
      expect(late.body.error.code).toBe('operation_expired');
    }
    expect(await snapshot(pool, message, actor)).toEqual(before);
    expect((await reactions(token, message)).body).toEqual(current);
  });
});
