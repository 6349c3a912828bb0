import { env } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { afterTurnSettled, type TurnSettlement } from '../../workers/channel/typing-hooks';
import { Deadline } from '../../workers/clock';
import { withTx } from '../../workers/db/tx';
import { loadConfig } from '../../workers/env';
import type { Installation } from '../../workers/installations/store';
import { LarkClient } from '../../workers/lark/client';
import {
  addTypingBadge,
  markInputsTasked,
  settleTurnInputs,
  withdrawAfterCommit,
} from '../../workers/typing-ledger';
import { runMaintenancePasses } from '../../workers/typing-ledger/maintenance-passes';
import { runRemoteRetry } from '../../workers/typing-ledger/passes/retry';
import { advanceDbClock, blockedBehind, setDbClockOffset, testPool, uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { emu, releaseHeld, untilHeld } from '../lark/helpers';
import { liveRows, quietEmulator, trackWorkspaces } from '../typing-maintenance/helpers';
import {
  advanceClocks,
  keys,
  makeInstallation,
  newMessage,
  reactionsOn,
  register,
  registeredId,
  row,
  typingOf,
} from './helpers';

/**
 * Issue 28: the last ways a typing badge is left behind, re-driven or lost. Each test was
 * seen failing on the code before its fix (docs/typing-ledger.md "Issue 28").
 */
let pool: Pool;
/** Another isolate (the after-commit effect of the settling replica). */
let other: Pool;
const { track, dropAll } = trackWorkspaces();
const config = loadConfig(env);
const held: { end(): Promise<void> }[] = [];

/** A connection in an open transaction; the file's cleanup rolls it back if a test fails. */
async function openTransaction() {
  const client = await pool.connect();
  let open = true;
  const finish = async (how: 'commit' | 'rollback') => {
    if (!open) return;
    open = false;
    await client.query(how);
    client.release();
  };
  held.push({ end: () => finish('rollback') });
  await client.query('begin');
  return { client, commit: () => finish('commit'), rollback: () => finish('rollback') };
}

/** Polls until `ok()` (an event the code under test reports), never a fixed sleep. */
async function until(ok: () => boolean, timeoutMs = 10_000): Promise<void> {
  const started = Date.now();
  while (!ok()) {
    if (Date.now() - started > timeoutMs) throw new Error('condition never held');
    await new Promise((r) => setTimeout(r, 10));
  }
}

beforeAll(() => {
  pool = testPool(8);
  other = testPool(4);
});
beforeEach(() => quietEmulator());
afterEach(async () => {
  for (const h of held.splice(0)) await h.end();
  await emu('faults', undefined, 'DELETE');
  await setDbClockOffset(pool, 0);
});
afterAll(async () => {
  await dropAll(pool);
  await quietEmulator(true);
  await other.end();
  await pool.end();
});

async function install(): Promise<Installation> {
  const inst = await makeInstallation(pool);
  track(inst.workspaceId);
  return inst;
}

function settle(sessionId: string, cutoff: number, turnNo = 1) {
  return withTx(pool, { budgetMs: 3000 }, (tx) =>
    settleTurnInputs(tx, {
      sessionId,
      contextRevision: 0,
      cutoffPosition: cutoff,
      settledBy: `turn:${turnNo}`,
      outcome: 'failed',
    }),
  );
}

function turnOf(
  inst: Installation,
  t: { sessionId: string; turnNo: number; cutoff: number; positions: number[]; messageIds: string[] },
): TurnSettlement {
  return {
    sessionId: t.sessionId,
    installationId: inst.id,
    workspaceId: inst.workspaceId,
    appId: inst.appId,
    turnNo: t.turnNo,
    contextRevision: 0,
    cutoffPosition: t.cutoff,
    positions: t.positions,
    messageIds: t.messageIds,
    anchorMessageId: t.messageIds[t.messageIds.length - 1]!,
    outcome: 'failed',
    replyMessageId: null,
  };
}

async function incidents(workspaceId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `select count(*)::int as n from typing_incidents where workspace_id = $1 and kind = 'withdraw_failed'`,
    [workspaceId],
  );
  return rows[0]!.n;
}

const scopeOf = (inst: Installation) => ({ workspaceIds: [inst.workspaceId] });

interface Call {
  route: string;
  messageId?: string;
  status: number | 'dropped';
}

async function callsOn(messageId: string, route?: string): Promise<Call[]> {
  const q = `calls?message_id=${encodeURIComponent(messageId)}${route ? `&route=${route}` : ''}`;
  return (await emu<{ calls: Call[] }>(q)).calls;
}

/**
 * Hole 1's starting point: an Add applied at Lark whose answer was lost (uncertain, no reaction
 * id, claimable after a minute), and a retry pass that claimed the unsettled row (resolve mode)
 * held on its listing.
 */
async function passHeldOnUnsettledRow() {
  const inst = await install();
  const session = uid('s');
  const messageId = await newMessage();
  const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
  const id = registeredId(reg);
  await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
  expect(await addTypingBadge(pool, reg)).toBe('uncertain');
  await advanceClocks(pool, 61_000);
  await emu('faults', { route: 'reactions.list', kind: 'hold' });
  const pass = runRemoteRetry(pool, { keys: keys(), scope: scopeOf(inst) });
  await untilHeld('reactions.list');
  return { inst, session, messageId, id, pass };
}

describe('hole 1: adoption after a concurrent settlement', () => {
  it('adopt.settled_meanwhile_keeps_schedule: the retry pass finds the badge after the turn settled and its after-commit listing was held by a 429: the row keeps a next attempt and the first pass after the reset deletes the badge', async () => {
    const { inst, session, messageId, id, pass } = await passHeldOnUnsettledRow();

    // Meanwhile the turn settles; its after-commit listing answers 429 with a reset.
    const ids = await settle(session, 1);
    await emu('faults', { route: 'reactions.list', kind: '429', resetSeconds: 60 });
    // The delete the pass makes now is refused too, so the badge must wait for the schedule.
    await emu('faults', { route: 'reactions.delete', kind: '429', resetSeconds: 60 });
    expect(await withdrawAfterCommit(other, keys(), ids)).toEqual({ [id]: 'rate_limited' });

    await releaseHeld();
    await pass;
    const after = await row(pool, id);
    expect(after.cleaned_at).toBeNull();
    expect(after.settled_at).not.toBeNull();
    expect(after.next_attempt_at).not.toBeNull();
    expect(await typingOf(messageId, inst.appId)).toHaveLength(1);

    await advanceClocks(pool, 61_000);
    const next = await runRemoteRetry(pool, { keys: keys(), scope: scopeOf(inst) });
    expect(next.cleaned).toBe(1);
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
    expect((await row(pool, id)).cleaned_at).not.toBeNull();
  });

  it('adopt.settled_meanwhile_deleted_now: with the delete route free, the badge found for a row settled meanwhile is deleted by the same pass', async () => {
    const { inst, session, messageId, id, pass } = await passHeldOnUnsettledRow();
    await settle(session, 1);
    await releaseHeld();
    const report = await pass;
    expect(report.adopted).toBe(0);
    expect(report.cleaned).toBe(1);
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
    const after = await row(pool, id);
    expect(after.cleaned_at).not.toBeNull();
    expect(after.credential_snapshot).toBeNull();
  });
});

describe("hole 2: a later turn re-drives an earlier turn's rows", () => {
  it("later_turn.leaves_earlier_rows: an earlier turn's unfinished row is not listed again, its backoff is unchanged and no incident is counted", async () => {
    const inst = await install();
    const session = uid('s');
    const [m1, m2] = [await newMessage(), await newMessage()];
    // Turn 1: an uncertain Add that never landed (5xx, nothing applied), settled, swept empty.
    const r1 = await register(pool, inst, { sessionId: session, messageId: m1, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: '5xx', status: 503 });
    expect(await addTypingBadge(pool, r1)).toBe('uncertain');
    const ids1 = await settle(session, 1, 1);
    await advanceDbClock(pool, 61_000);
    // Its own empty sweep is the spec's waiting state, not a failed withdrawal: no incident.
    expect(await withdrawAfterCommit(pool, keys(), ids1)).toEqual({ [registeredId(r1)]: 'unconfirmed' });
    expect(await incidents(inst.workspaceId)).toBe(0);
    // The retry pass has backed it off to an hour by now.
    await pool.query(
      `update channel_typing_reaction set next_attempt_at = app_now() + interval '1 hour' where id = $1`,
      [registeredId(r1)],
    );
    const before = await row(pool, registeredId(r1));
    const incidentsBefore = await incidents(inst.workspaceId);

    // Turn 2 of the same conversation.
    const r2 = await register(pool, inst, { sessionId: session, messageId: m2, position: 2 });
    expect(await addTypingBadge(pool, r2)).toBe('added');
    await settle(session, 2, 2);
    await emu('calls', undefined, 'DELETE');
    await afterTurnSettled(
      config,
      turnOf(inst, { sessionId: session, turnNo: 2, cutoff: 2, positions: [2], messageIds: [m2] }),
      pool,
    );

    expect(await typingOf(m2, inst.appId)).toHaveLength(0);
    expect(await callsOn(m1)).toEqual([]);
    const after = await row(pool, registeredId(r1));
    expect(after.next_attempt_at).toEqual(before.next_attempt_at);
    expect(after.last_error).toBe(before.last_error);
    expect(await incidents(inst.workspaceId)).toBe(incidentsBefore);
  });

  it('schedule.never_shortens: a failed after-commit withdrawal never pulls a backed-off next attempt closer', async () => {
    const inst = await install();
    const session = uid('s');
    const m = await newMessage();
    const r = await register(pool, inst, { sessionId: session, messageId: m, position: 1 });
    expect(await addTypingBadge(pool, r)).toBe('added');
    const ids = await settle(session, 1);
    // The retry pass claimed it since and backed it off to an hour (the effect re-runs later).
    await pool.query(
      `update channel_typing_reaction set next_attempt_at = app_now() + interval '1 hour' where id = $1`,
      [registeredId(r)],
    );
    const before = await row(pool, registeredId(r));
    await emu('faults', { route: 'reactions.delete', kind: '5xx', status: 503 });
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(r)]: 'retryable' });
    expect((await row(pool, registeredId(r))).next_attempt_at).toEqual(before.next_attempt_at);
  });
});

describe('hole 3: the seven-day deadline on the after-commit path', () => {
  const WEEK = 7 * 86_400_000;

  it('deadline.after_commit_no_call: a turn settling after its row passed expires_at makes no remote call and ends the row abandoned, not cleaned', async () => {
    const inst = await install();
    const session = uid('s');
    const m = await newMessage();
    const r = await register(pool, inst, { sessionId: session, messageId: m, position: 1 });
    expect(await addTypingBadge(pool, r)).toBe('added');
    // Expiry lags (maintenance stopped): the row is past its deadline, still live.
    await advanceDbClock(pool, WEEK + 60_000);
    await settle(session, 1);
    await emu('calls', undefined, 'DELETE');
    await afterTurnSettled(
      config,
      turnOf(inst, { sessionId: session, turnNo: 1, cutoff: 1, positions: [1], messageIds: [m] }),
      pool,
    );
    expect(await callsOn(m)).toEqual([]);
    const after = await row(pool, registeredId(r));
    expect(after.cleaned_at).toBeNull();
    expect(after.abandoned_at).not.toBeNull();
    expect(after.credential_snapshot).toBeNull();
    expect(after.quota_slot).toBeNull();
  });

  it('deadline.empty_sweep_not_cleaned: an unfinished Add past its deadline is not swept and not recorded cleaned', async () => {
    const inst = await install();
    const session = uid('s');
    const m = await newMessage();
    const r = await register(pool, inst, { sessionId: session, messageId: m, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: '5xx', status: 503 });
    expect(await addTypingBadge(pool, r)).toBe('uncertain');
    await advanceDbClock(pool, WEEK + 60_000);
    const ids = await settle(session, 1);
    await emu('calls', undefined, 'DELETE');
    const out = await withdrawAfterCommit(pool, keys(), ids);
    expect(out[registeredId(r)]).toBe('expired');
    expect(await callsOn(m)).toEqual([]);
    const after = await row(pool, registeredId(r));
    expect(after.cleaned_at).toBeNull();
    expect(after.abandoned_at).not.toBeNull();
  });

  it("deadline.later_turn_old_row: with maintenance stopped, an earlier turn's row past its deadline gets no call and no cleaned from a later turn", async () => {
    const inst = await install();
    const session = uid('s');
    const [m1, m2] = [await newMessage(), await newMessage()];
    const r1 = await register(pool, inst, { sessionId: session, messageId: m1, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: '5xx', status: 503 });
    expect(await addTypingBadge(pool, r1)).toBe('uncertain');
    await settle(session, 1, 1);
    await advanceDbClock(pool, WEEK + 60_000);
    const r2 = await register(pool, inst, { sessionId: session, messageId: m2, position: 2 });
    expect(await addTypingBadge(pool, r2)).toBe('added');
    await settle(session, 2, 2);
    await emu('calls', undefined, 'DELETE');
    await afterTurnSettled(
      config,
      turnOf(inst, { sessionId: session, turnNo: 2, cutoff: 2, positions: [2], messageIds: [m2] }),
      pool,
    );
    expect(await callsOn(m1)).toEqual([]);
    expect((await row(pool, registeredId(r1))).cleaned_at).toBeNull();
    expect(await typingOf(m2, inst.appId)).toHaveLength(0);
  });
});

describe('hole 4: a 4xx without Lark JSON is not proof that the Add was not applied', () => {
  it('add.gateway_408_uncertain: an Add answered by a gateway 408 stays uncertain and keeps its slot and snapshot', async () => {
    const inst = await install();
    const session = uid('s');
    const m = await newMessage();
    const r = await register(pool, inst, { sessionId: session, messageId: m, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: '5xx', status: 408 });
    expect(await addTypingBadge(pool, r)).toBe('uncertain');
    const after = await row(pool, registeredId(r));
    expect(after.cleaned_at).toBeNull();
    expect(after.add_state).toBe('uncertain');
    expect(after.quota_slot).not.toBeNull();
    expect(after.credential_snapshot).not.toBeNull();
  });
});

describe('hole 6: a refused Add whose first write fails', () => {
  it('refused.close_retried: the close of a refused Add is retried in the same budget when its first write fails, so its quota slot is freed', async () => {
    const inst = await install();
    const m = await newMessage();
    const r = await register(pool, inst, { sessionId: uid('s'), messageId: m, position: 1 });
    const id = registeredId(r);
    // The first write of the refusal fails, the next one does not: forced by a trigger that
    // refuses this row's `not_added` write once (a sequence counts, which a rollback keeps),
    // not by a lock released in time for the retry (on a loaded machine the retry's own
    // 300 ms ran out before the release and the test failed without any defect).
    await failFirstNotAddedWrite(id);
    await emu('faults', { route: 'reactions.create', kind: '429', resetSeconds: 1 });
    const logs = captureLogLines();
    const adding = addTypingBadge(pool, r, { recordBudgetMs: 300 });
    try {
      await adding;
    } finally {
      await pool.query('drop trigger fail_first_not_added on channel_typing_reaction');
    }
    expect(logs.events('typing_add_record_failed')).toHaveLength(1);
    expect(await adding.finally(logs.restore)).toBe('not_added');
    expect(await row(pool, id)).toMatchObject({
      add_state: 'not_added',
      cleaned_at: expect.any(Date),
      quota_slot: null,
      credential_snapshot: null,
    });
  });
});

/**
 * Makes the first `not_added` write of row `id` fail (an exception in a trigger), and only the
 * first. The row is named in a table, so the id goes in as a parameter.
 */
async function failFirstNotAddedWrite(id: string): Promise<void> {
  await pool.query('drop sequence if exists fail_first_not_added_seq');
  await pool.query('create sequence fail_first_not_added_seq');
  await pool.query('create table if not exists fail_first_not_added_rows (id text primary key)');
  await pool.query('insert into fail_first_not_added_rows (id) values ($1)', [id]);
  await pool.query(
    `create or replace function fail_first_not_added() returns trigger language plpgsql as $$
     begin
       if new.add_state = 'not_added' and exists (select 1 from fail_first_not_added_rows f where f.id = new.id)
          and nextval('fail_first_not_added_seq') = 1 then
         raise exception 'forced: the first write of this refusal fails';
       end if;
       return new;
     end $$`,
  );
  await pool.query(
    `create trigger fail_first_not_added before update on channel_typing_reaction
       for each row execute function fail_first_not_added()`,
  );
}

/** Resolves once backend `pid` has waited on a lock for `ms` (Postgres's clock), polling. */
async function waitingFor(pid: number, ms: number): Promise<void> {
  for (;;) {
    const { rows } = await pool.query<{ waited: number | null }>(
      `select extract(epoch from clock_timestamp() - state_change) * 1000 as waited
       from pg_stat_activity where pid = $1 and wait_event_type = 'Lock'`,
      [pid],
    );
    if ((rows[0]?.waited ?? 0) >= ms) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('hole 8: an Add recorded while its own flush holds the row', () => {
  it('record.waits_for_flush: the flush (markInputsTasked, not yet committed) holds the row past one second; the Add waits for it and keeps the live badge', async () => {
    const inst = await install();
    const session = uid('s');
    const m = await newMessage();
    const r = await register(pool, inst, { sessionId: session, messageId: m, position: 1 });
    // The flush's fenced commit: the turn's inputs are marked tasked, the commit not yet done.
    const flush = await openTransaction();
    await markInputsTasked(flush.client, { sessionId: session, contextRevision: 0, cutoffPosition: 1 });
    const { rows } = await flush.client.query<{ pid: number }>('select pg_backend_pid() as pid');
    const adding = addTypingBadge(pool, r);
    const recorder = await blockedBehind(pool, rows[0]!.pid);
    const first = await Promise.race([adding, waitingFor(recorder, 1500).then(() => 'still waiting')]);
    expect(first).toBe('still waiting');
    await flush.commit();
    expect(await adding).toBe('added');
    expect(await typingOf(m, inst.appId)).toHaveLength(1);
    expect(await row(pool, registeredId(r))).toMatchObject({
      add_state: 'added',
      taskless: false,
      cleaned_at: null,
    });
  });
});

describe('hole 9: decisions recorded by a test', () => {
  it("decision.other_letter_case_kept: our own app's reaction `typing` (another letter case) is not our badge and is not swept", async () => {
    const inst = await install();
    const session = uid('s');
    const m = await newMessage();
    const r = await register(pool, inst, { sessionId: session, messageId: m, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
    expect(await addTypingBadge(pool, r)).toBe('uncertain');
    await emu(`messages/${m}/reactions`, { emoji_type: 'typing', app_id: inst.appId });
    await emu(`messages/${m}/reactions`, { emoji_type: 'TYPING', app_id: inst.appId });
    const ids = await settle(session, 1);
    await advanceDbClock(pool, 61_000);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(r)]: 'cleaned' });
    expect((await reactionsOn(m)).map((x) => x.reaction_type.emoji_type).sort()).toEqual([
      'TYPING',
      'typing',
    ]);
  });

  it('decision.already_gone_not_relisted: a precise delete answered 231011 (reaction gone) is taken as absence without listing the message', async () => {
    const inst = await install();
    const [live] = await liveRows(pool, inst, 1);
    const { rows } = await pool.query<{ reaction_id: string }>(
      'select reaction_id from channel_typing_reaction where id = $1',
      [live!.id],
    );
    // The badge is removed behind the ledger's back (another replica, a user's client).
    await new LarkClient({
      baseUrl: inst.apiBase,
      appId: inst.appId,
      appSecret: inst.appSecret,
    }).deleteReaction(live!.messageId, rows[0]!.reaction_id, { deadline: new Deadline(2000) });
    await emu('calls', undefined, 'DELETE');
    expect(await withdrawAfterCommit(pool, keys(), [live!.id])).toEqual({ [live!.id]: 'already_gone' });
    const seen = await callsOn(live!.messageId);
    expect(seen.map((c) => c.route)).toEqual(['reactions.delete']);
    expect((await row(pool, live!.id)).cleaned_at).not.toBeNull();
  });

  it('decision.step_failure_isolated: a maintenance step that throws does not stop the next steps', async () => {
    const inst = await install();
    const [live] = await liveRows(pool, inst, 1);
    // The expiry step runs into its lock timeout on the ledger table; the lock goes once that
    // failure is logged, and the pruning and retry steps run after it.
    const holder = await openTransaction();
    await holder.client.query('lock table channel_typing_reaction in access exclusive mode');
    const logs = captureLogLines();
    const run = runMaintenancePasses(pool, { keys: keys(), scope: scopeOf(inst) });
    try {
      await until(() => logs.events('typing_maintenance_step_failed').length > 0);
    } finally {
      await holder.rollback();
    }
    const report = await run.finally(logs.restore);
    expect(report.expire).toHaveProperty('error');
    expect(report.prune).toMatchObject({ pruned: 0 });
    expect(report.retry).toMatchObject({ claimed: 1, cleaned: 1 });
    expect(await typingOf(live!.messageId, inst.appId)).toHaveLength(0);
    expect(logs.events('typing_maintenance_step_failed')).toEqual([
      expect.objectContaining({ step: 'expire' }),
    ]);
  });
});

describe('proof: a settlement transaction open and uncommitted authorizes nothing', () => {
  it('proof.open_settlement: while it is open the retry pass and the Add withdraw nothing; after rollback nothing; after commit only the old inputs go', async () => {
    const inst = await install();
    const session = uid('s');
    const [m0, m1, m2] = [await newMessage(), await newMessage(), await newMessage()];
    const r0 = await register(pool, inst, { sessionId: session, messageId: m0, position: 1 });
    const r1 = await register(pool, inst, { sessionId: session, messageId: m1, position: 2 });
    const r2 = await register(pool, inst, { sessionId: session, messageId: m2, position: 3 });
    // Input 1: applied, answer lost (uncertain, due for the retry pass after a minute).
    await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
    expect(await addTypingBadge(pool, r0)).toBe('uncertain');
    // Input 3 (a later one, not this turn's): its badge is on.
    expect(await addTypingBadge(pool, r2)).toBe('added');
    await advanceClocks(pool, 61_000);
    // Input 2: its Add is in flight at Lark.
    await emu('faults', { route: 'reactions.create', kind: 'hold' });
    const adding = addTypingBadge(pool, r1);
    await untilHeld('reactions.create');

    // The turn's terminal transaction settles inputs 1-2 and stays open.
    const tx = await openTransaction();
    const settled = await settleTurnInputs(tx.client, {
      sessionId: session,
      contextRevision: 0,
      cutoffPosition: 2,
      settledBy: 'turn:1',
      outcome: 'delivered',
    });
    expect(settled.sort()).toEqual([registeredId(r0), registeredId(r1)].sort());
    const { rows } = await tx.client.query<{ pid: number }>('select pg_backend_pid() as pid');
    expect(await runRemoteRetry(pool, { keys: keys(), scope: scopeOf(inst) })).toMatchObject({ claimed: 0 });
    await releaseHeld(); // Lark applies the Add; its record waits for the open transaction
    await blockedBehind(pool, rows[0]!.pid);
    const badges = async () => [
      (await typingOf(m0, inst.appId)).length,
      (await typingOf(m1, inst.appId)).length,
      (await typingOf(m2, inst.appId)).length,
    ];
    expect(await badges()).toEqual([1, 1, 1]);

    // Rolled back: the Add revalidates a live input, the retry pass adopts, nothing goes.
    await tx.rollback();
    expect(await adding).toBe('added');
    expect(await runRemoteRetry(pool, { keys: keys(), scope: scopeOf(inst) })).toMatchObject({
      claimed: 1,
      adopted: 1,
      cleaned: 0,
    });
    expect(await badges()).toEqual([1, 1, 1]);

    // Committed: only this turn's inputs lose their badges.
    const ids = await settle(session, 2);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({
      [registeredId(r0)]: 'cleaned',
      [registeredId(r1)]: 'cleaned',
    });
    expect(await badges()).toEqual([0, 0, 1]);
    expect((await row(pool, registeredId(r2))).settled_at).toBeNull();
  });
});
