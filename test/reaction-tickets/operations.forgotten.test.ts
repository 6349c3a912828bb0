import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { operationStampMs } from '../../workers/reaction-tickets/operation-id';
import { deleteBatch } from '../../workers/retention/batch';
import { advanceDbClock, dbNowMs, setDbClockOffset, testPool } from '../helpers/db';
import { runSteps } from '../housekeeping/helpers';
import {
  call,
  DAY_MS,
  issue,
  opId,
  put,
  reactions,
  reopenLegacyContract,
  retire,
  seedWorld,
  snapshot,
  ticketFor,
} from './helpers';

/**
 * Issue 15 items 1 and 5: whatever housekeeping and the retention cleanup have deleted, an
 * operation older than the admission window (REACTION_TICKET_TTL_SECONDS, 7 days) is never
 * admitted again, and a replay the server can no longer judge gets a terminal answer that
 * says "unknown, read the current state", never a refusal that implies it did not apply.
 */
const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const WINDOW_MS = 7 * DAY_MS;

/** Every deletion that can forget an operation, with the production retention defaults. */
async function forgetEverythingDue(): Promise<{ tickets: number; receipts: number; fences: number }> {
  const tickets = (await runSteps(pool, ['tickets'], { ticketGraceMs: 30 * DAY_MS })).tickets ?? 0;
  const limits = { receiptRetentionMs: 30 * DAY_MS, fenceRetentionMs: 90 * DAY_MS, drainGraceMs: 3_600_000 };
  const receipts = (await deleteBatch(pool, 'receipts', limits, null)).deleted;
  const fences = (await deleteBatch(pool, 'fences', limits, null)).deleted;
  return { tickets, receipts, fences };
}

async function rowsOf(actorId: string, operationId: string) {
  const { rows } = await pool.query(
    `select (select count(*)::int from private.reaction_tickets where actor_id = $1 and operation_id = $2) as tickets,
            (select count(*)::int from private.chat_reaction_operations where actor_id = $1 and operation_id = $2) as receipts`,
    [actorId, operationId],
  );
  return rows[0];
}

describe('a forgotten operation stays dead (item 1)', () => {
  for (const day of [37, 400]) {
    it(`day ${day}: an operation whose issuance answer was lost is refused terminally once its ticket is deleted; the newer choice stands`, async () => {
      const w = await seedWorld();
      const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
      const thumbs = { messageId: message, emoji: '👍' };
      // The old choice: issued, but the answer never reached the device.
      const old = opId();
      expect((await issue(token, old, { ...thumbs, desired: 'present' })).status).toBe(201);
      // A newer choice applies (present), then an even newer one (absent).
      for (const desired of ['present', 'absent'] as const) {
        const op = opId();
        const t = await ticketFor(token, op, { ...thumbs, desired });
        expect((await put(token, op, t, { ...thumbs, desired })).status).toBe(200);
      }
      await advanceDbClock(pool, day * DAY_MS + 3_600_000);
      expect((await forgetEverythingDue()).tickets).toBeGreaterThanOrEqual(3);
      expect(await rowsOf(actor, old)).toEqual({ tickets: 0, receipts: 0 });

      // The device resumes and re-requests its old operation.
      const before = await snapshot(pool, message, actor);
      const current = (await reactions(token, message)).body;
      const again = await issue(token, old, { ...thumbs, desired: 'present' });
      expect(again.status, JSON.stringify(again.body)).toBe(410);
      expect(again.body.error.code).toBe('operation_expired');
      expect(again.body.error.details).toMatchObject({ operationId: old, receipt: null, message: current });
      expect(await rowsOf(actor, old)).toEqual({ tickets: 0, receipts: 0 });
      expect(await snapshot(pool, message, actor)).toEqual(before);
    });

    it(`day ${day}: an applied operation whose ticket and receipt were deleted is never admitted again; replaying its write is 410 operation_outcome_unknown`, async () => {
      const w = await seedWorld();
      const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
      const heart = { messageId: message, emoji: '❤️' };
      const applied = opId();
      const appliedTicket = await ticketFor(token, applied, { ...heart, desired: 'present' });
      expect((await put(token, applied, appliedTicket, { ...heart, desired: 'present' })).status).toBe(200);
      const newer = opId();
      const newerTicket = await ticketFor(token, newer, { ...heart, desired: 'absent' });
      expect((await put(token, newer, newerTicket, { ...heart, desired: 'absent' })).status).toBe(200);

      await advanceDbClock(pool, day * DAY_MS + 3_600_000);
      const forgotten = await forgetEverythingDue();
      expect(forgotten).toMatchObject({ tickets: 2, receipts: 2 });
      expect(await rowsOf(actor, applied)).toEqual({ tickets: 0, receipts: 0 });

      const before = await snapshot(pool, message, actor);
      const current = (await reactions(token, message)).body;
      // The lost write answer is replayed with the ticket the device kept.
      const replay = await put(token, applied, appliedTicket, { ...heart, desired: 'present' });
      expect(replay.status, JSON.stringify(replay.body)).toBe(410);
      expect(replay.body.error.code).toBe('operation_outcome_unknown');
      expect(replay.body.error.details).toMatchObject({ operationId: applied, message: current });
      const retired = await retire(token, applied, appliedTicket);
      expect(retired.status).toBe(410);
      expect(retired.body.error.code).toBe('operation_outcome_unknown');
      // Re-requesting its ticket is the terminal expiry, never a fresh window.
      const reissue = await issue(token, applied, { ...heart, desired: 'present' });
      expect(reissue.status, JSON.stringify(reissue.body)).toBe(410);
      expect(reissue.body.error.code).toBe('operation_expired');
      expect(await rowsOf(actor, applied)).toEqual({ tickets: 0, receipts: 0 });
      expect(await snapshot(pool, message, actor)).toEqual(before);
    });
  }

  it('an operation stamped more than the window ago is refused at its first issuance (journaled while signed out), at day 8 and day 400', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const intent = { messageId: message, emoji: '🎉', desired: 'present' as const };
    const before = await snapshot(pool, message, actor);
    const current = (await reactions(token, message)).body;
    for (const age of [WINDOW_MS + 60_000, 8 * DAY_MS, 400 * DAY_MS]) {
      const op = opId(age);
      const res = await issue(token, op, intent);
      expect(res.status, `age ${age}: ${JSON.stringify(res.body)}`).toBe(410);
      expect(res.body.error.code).toBe('operation_expired');
      expect(res.body.error.details).toMatchObject({ operationId: op, receipt: null, message: current });
      expect(Date.parse(res.body.error.details.expiredAt)).toBe(
        Date.parse(res.body.error.details.stampedAt) + WINDOW_MS,
      );
    }
    expect(await snapshot(pool, message, actor)).toEqual(before);
    const { rows } = await pool.query(
      'select count(*)::int as n from private.reaction_tickets where actor_id = $1',
      [actor],
    );
    expect(rows[0].n).toBe(0);
  });

  it('a ticket never outlives its operation: an operation stamped 6 days ago gets a ticket that expires one day later', async () => {
    const w = await seedWorld();
    const op = opId(6 * DAY_MS);
    const stamp = operationStampMs(op)!;
    const res = await issue(w.tokens[0]!, op, { messageId: w.messages[0]!, emoji: '🎉', desired: 'present' });
    expect(res.status).toBe(201);
    expect(Date.parse(res.body.expiresAt)).toBe(stamp + WINDOW_MS);
  });

  it('an operation stamped in the future beyond the allowed skew is refused with 422 operation_clock_skew and the server time; nothing is written', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId(-60 * 60_000);
    const res = await issue(token, op, { messageId: message, emoji: '🎉', desired: 'present' });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error.code).toBe('operation_clock_skew');
    const serverTime = Date.parse(res.body.error.details.serverTime);
    expect(Math.abs(serverTime - (await dbNowMs(pool)))).toBeLessThan(60_000);
    const { rows } = await pool.query(
      'select count(*)::int as n from private.reaction_tickets where actor_id = $1',
      [actor],
    );
    expect(rows[0].n).toBe(0);
    // Within the skew (a device clock a minute fast) it is admitted.
    expect(
      (await issue(token, opId(-60_000), { messageId: message, emoji: '🎉', desired: 'present' })).status,
    ).toBe(201);
  });

  it('an operation ID without a creation stamp (not a UUIDv7) gets no new ticket: 400 validation_failed', async () => {
    const w = await seedWorld();
    const intent = { messageId: w.messages[0]!, emoji: '🎉', desired: 'present' as const };
    const res = await issue(w.tokens[0]!, crypto.randomUUID(), intent);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('validation_failed');
  });

  it('the ticketless legacy path refuses a stamped operation older than the window, whatever was deleted', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    await reopenLegacyContract(pool);
    const intent = { messageId: message, emoji: '🎯', desired: 'present' as const };
    const before = await snapshot(pool, message, actor);
    const old = await put(token, opId(8 * DAY_MS), undefined, intent);
    expect(old.status, JSON.stringify(old.body)).toBe(410);
    expect(old.body.error.code).toBe('operation_expired');
    expect(await snapshot(pool, message, actor)).toEqual(before);
    // A legacy client's own IDs (no stamp) keep the legacy contract's behaviour.
    expect((await put(token, crypto.randomUUID(), undefined, intent)).status).toBe(200);
  });
});

describe('raising REACTION_TICKET_TTL_SECONDS never reopens an operation (issue 29 hole 4)', () => {
  const RAISED = { REACTION_TICKET_TTL_SECONDS: String(90 * 86_400) };
  const issueWith = (token: string, operationId: string, intent: object, env?: Record<string, unknown>) =>
    call('POST', '/v1/reaction-tickets', { token, body: { operationId, ...intent }, env });

  it('an operation forgotten under 7 days is refused after the TTL is raised to 90; one stamped after the raise gets 90', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const thumbs = { messageId: message, emoji: '👍' };
    // The old choice, issued under 7 days; its answer never reached the device.
    const old = opId();
    expect((await issue(token, old, { ...thumbs, desired: 'present' })).status).toBe(201);
    const newer = opId();
    const t = await ticketFor(token, newer, { ...thumbs, desired: 'absent' });
    expect((await put(token, newer, t, { ...thumbs, desired: 'absent' })).status).toBe(200);
    await advanceDbClock(pool, 37 * DAY_MS + 3_600_000);
    expect((await forgetEverythingDue()).tickets).toBeGreaterThanOrEqual(2);
    expect(await rowsOf(actor, old)).toEqual({ tickets: 0, receipts: 0 });

    // The operator raises the window to 90 days; the device resumes its old operation.
    const before = await snapshot(pool, message, actor);
    const again = await issueWith(token, old, { ...thumbs, desired: 'present' }, RAISED);
    expect(again.status, JSON.stringify(again.body)).toBe(410);
    expect(again.body.error.code).toBe('operation_expired');
    expect(Date.parse(again.body.error.details.expiredAt)).toBe(operationStampMs(old)! + WINDOW_MS);
    expect(await rowsOf(actor, old)).toEqual({ tickets: 0, receipts: 0 });
    expect(await snapshot(pool, message, actor)).toEqual(before);

    // The raise is in force once an issuance under it commits (the refused one above rolled
    // back); a choice stamped after that gets the raised window.
    const first = await issueWith(token, opId(), { ...thumbs, emoji: '🎈', desired: 'present' }, RAISED);
    expect(first.status).toBe(201);
    await advanceDbClock(pool, 1000);
    const fresh = opId();
    const issued = await issueWith(token, fresh, { ...thumbs, desired: 'present' }, RAISED);
    expect(issued.status, JSON.stringify(issued.body)).toBe(201);
    expect(Date.parse(issued.body.expiresAt) - operationStampMs(fresh)!).toBe(90 * DAY_MS);
  });

  it('a window lowered and raised again: an operation stamped before the lowering keeps the lowest window it was under', async () => {
    const w = await seedWorld();
    const [token, message] = [w.tokens[0]!, w.messages[0]!];
    const intent = { messageId: message, emoji: '🔥', desired: 'present' };
    const stamped = opId();
    // The window is lowered to one day (an issuance runs under it), then raised back.
    const lowered = { REACTION_TICKET_TTL_SECONDS: String(86_400) };
    expect((await issueWith(token, opId(), { ...intent, emoji: '🧊' }, lowered)).status).toBe(201);
    await advanceDbClock(pool, 2 * DAY_MS);
    const res = await issueWith(token, stamped, intent);
    expect(res.status, JSON.stringify(res.body)).toBe(410);
    expect(Date.parse(res.body.error.details.expiredAt)).toBe(operationStampMs(stamped)! + DAY_MS);
  });
});
