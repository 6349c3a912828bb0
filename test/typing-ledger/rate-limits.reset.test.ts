import { env } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { afterTurnSettled, type TurnSettlement } from '../../workers/channel/typing-hooks';
import { withTx } from '../../workers/db/tx';
import { loadConfig } from '../../workers/env';
import type { Installation } from '../../workers/installations/store';
import { addTypingBadge, settleTurnInputs, withdrawAfterCommit } from '../../workers/typing-ledger';
import { runPruning } from '../../workers/typing-ledger/passes/prune';
import { runRemoteRetry } from '../../workers/typing-ledger/passes/retry';
import { setDbClockOffset, testPool, uid } from '../helpers/db';
import { emu, forgetCachedToken } from '../lark/helpers';
import { liveRows, quietEmulator, trackWorkspaces } from '../typing-maintenance/helpers';
import {
  advanceClocks,
  keys,
  makeInstallation,
  newMessage,
  register,
  registeredId,
  row,
  typingOf,
} from './helpers';

/**
 * Issue 14 item 2: after a 429 with `x-ogw-ratelimit-reset`, no call to that app's route
 * leaves before the reset: not from re-runs of the turn-settled effect, not from the Add, not
 * from the retry pass, not from another isolate (a second pool). The emulator's call log is
 * the witness; its clock moves with the database's, so each call's time is comparable with
 * the 429's.
 */
let pool: Pool;
/** Another isolate: its own pool, nothing shared in memory with the first. */
let other: Pool;
const { track, dropAll } = trackWorkspaces();
const config = loadConfig(env);

beforeAll(() => {
  pool = testPool(8);
  other = testPool(4);
});
beforeEach(() => quietEmulator());
afterEach(async () => {
  await emu('faults', undefined, 'DELETE');
  await setDbClockOffset(pool, 0);
});
afterAll(async () => {
  await dropAll(pool);
  await quietEmulator(true);
  await other.end();
  await pool.end();
});

interface Call {
  route: string;
  appId?: string;
  status: number | 'dropped';
  at: number;
}

/** The calls of one route the emulator saw for one app (token calls name no app). */
async function callsTo(route: string, appId: string): Promise<Call[]> {
  const { calls } = await emu<{ calls: Call[] }>(`calls?route=${route}`);
  return calls.filter((c) => c.appId === appId);
}

/** The token endpoint's calls for one app (a token call names its app in its body). */
async function tokenCalls(appId: string): Promise<Call[]> {
  const { calls } = await emu<{ calls: (Call & { requestedAppId?: string })[] }>('calls?route=token');
  return calls.filter((c) => c.requestedAppId === appId);
}

async function install(): Promise<Installation> {
  const inst = await makeInstallation(pool);
  track(inst.workspaceId);
  return inst;
}

function settle(sessionId: string, cutoff: number) {
  return withTx(pool, { budgetMs: 3000 }, (tx) =>
    settleTurnInputs(tx, {
      sessionId,
      contextRevision: 0,
      cutoffPosition: cutoff,
      settledBy: 'turn:1',
      outcome: 'failed',
    }),
  );
}

function turnOf(inst: Installation, sessionId: string, messageId: string): TurnSettlement {
  return {
    sessionId,
    installationId: inst.id,
    workspaceId: inst.workspaceId,
    appId: inst.appId,
    turnNo: 1,
    contextRevision: 0,
    cutoffPosition: 1,
    positions: [1],
    messageIds: [messageId],
    anchorMessageId: messageId,
    outcome: 'failed',
    replyMessageId: null,
  };
}

const settled = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: unknown) => `rejected: ${(e as Error).message}`,
  );

describe('a 429 reset holds the route', () => {
  it('the turn-settled effect re-run at +2 s and +4 s sends no delete before the reset; the retry pass removes the badge after it', async () => {
    const inst = await install();
    const session = uid('s');
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    expect(await addTypingBadge(pool, reg)).toBe('added');
    await settle(session, 1);
    const turn = turnOf(inst, session, messageId);
    await emu('faults', { route: 'reactions.delete', kind: '429', resetSeconds: 8 });

    const runs = [await settled(afterTurnSettled(config, turn))];
    // The effect's retries, as the effect runtime schedules them (~2 s, then ~4 s).
    await advanceClocks(pool, 2000);
    runs.push(await settled(afterTurnSettled(config, turn)));
    await advanceClocks(pool, 2000);
    runs.push(await settled(afterTurnSettled(config, turn)));
    // And a maintenance pass before the reset.
    const early = await runRemoteRetry(other, { keys: keys(), scope: { workspaceIds: [inst.workspaceId] } });

    const before = await callsTo('reactions.delete', inst.appId);
    expect(before.map((c) => c.status)).toEqual([429]);
    expect(await typingOf(messageId, inst.appId)).toHaveLength(1);
    // Scheduled for the retry pass at the reset (at least its 30 s first retry), so the
    // effect has nothing to retry: it does not fail, and the early pass finds nothing due.
    expect(runs).toEqual(['resolved', 'resolved', 'resolved']);
    expect(early.claimed).toBe(0);
    const r = await row(pool, registeredId(reg));
    expect(r.last_error).toMatch(/^withdraw:retryable:99991400/);
    expect(r.cleaned_at).toBeNull();

    // Each gated re-run rescheduled the row (30 s first retry from its run, the last at +4 s).
    await advanceClocks(pool, 31_000);
    const after = await runRemoteRetry(other, { keys: keys(), scope: { workspaceIds: [inst.workspaceId] } });
    expect(after).toMatchObject({ claimed: 1, cleaned: 1 });
    const deletes = await callsTo('reactions.delete', inst.appId);
    expect(deletes.map((c) => c.status)).toEqual([429, 200]);
    expect(deletes[1]!.at - deletes[0]!.at).toBeGreaterThanOrEqual(8000);
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
  });

  it('the Add honours a reset another isolate recorded: the gated Add is not sent, its row is closed and its slot freed', async () => {
    const inst = await install();
    const session = uid('s');
    const first = await register(pool, inst, {
      sessionId: session,
      messageId: await newMessage(),
      position: 1,
    });
    await emu('faults', { route: 'reactions.create', kind: '429', resetSeconds: 8 });
    expect(await addTypingBadge(pool, first)).toBe('not_added');

    await advanceClocks(pool, 4000);
    const gatedMessage = await newMessage();
    const gated = await register(pool, inst, { sessionId: session, messageId: gatedMessage, position: 2 });
    expect(await addTypingBadge(other, gated)).toBe('not_added');
    expect((await callsTo('reactions.create', inst.appId)).map((c) => c.status)).toEqual([429]);
    expect(await row(pool, registeredId(gated))).toMatchObject({
      add_state: 'not_added',
      quota_slot: null,
      credential_snapshot: null,
      last_error: 'add:not_sent:99991400',
    });
    expect(await typingOf(gatedMessage, inst.appId)).toHaveLength(0);

    // Lark limits each API on its own: the create limit does not hold the delete route.
    const [live] = await liveRows(pool, inst, 1);
    expect(await withdrawAfterCommit(other, keys(), [live!.id])).toEqual({ [live!.id]: 'cleaned' });

    await advanceClocks(pool, 4000);
    const laterMessage = await newMessage();
    const later = await register(pool, inst, { sessionId: session, messageId: laterMessage, position: 3 });
    expect(await addTypingBadge(other, later)).toBe('added');
    const creates = await callsTo('reactions.create', inst.appId);
    expect(creates.map((c) => c.status)).toEqual([429, 200]);
    expect(creates[1]!.at - creates[0]!.at).toBeGreaterThanOrEqual(8000);
  });

  it("the retry pass honours a reset recorded by another isolate's withdrawal: the app's due rows wait for it", async () => {
    const inst = await install();
    const live = await liveRows(pool, inst, 3);
    await emu('faults', { route: 'reactions.delete', kind: '429', resetSeconds: 60 });
    expect(await withdrawAfterCommit(pool, keys(), [live[0]!.id])).toEqual({ [live[0]!.id]: 'rate_limited' });

    const pass = await runRemoteRetry(other, { keys: keys(), scope: { workspaceIds: [inst.workspaceId] } });
    expect(pass).toMatchObject({ claimed: 2, cleaned: 0 });
    expect((await callsTo('reactions.delete', inst.appId)).map((c) => c.status)).toEqual([429]);
    for (const l of live) {
      const { rows } = await pool.query<{ s: number }>(
        'select extract(epoch from next_attempt_at - app_now())::float8 as s from channel_typing_reaction where id = $1',
        [l.id],
      );
      expect(rows[0]!.s).toBeGreaterThanOrEqual(59);
    }

    await advanceClocks(pool, 61_000);
    const after = await runRemoteRetry(other, { keys: keys(), scope: { workspaceIds: [inst.workspaceId] } });
    expect(after).toMatchObject({ claimed: 3, cleaned: 3 });
    const deletes = await callsTo('reactions.delete', inst.appId);
    expect(deletes.map((c) => c.status)).toEqual([429, 200, 200, 200]);
    for (const d of deletes.slice(1)) expect(d.at - deletes[0]!.at).toBeGreaterThanOrEqual(60_000);
  });

  it('rate_limits.token_endpoint_held: a 429 on the token endpoint holds every token fetch of that app until its reset, in every isolate', async () => {
    const inst = await install();
    const live = await liveRows(pool, inst, 2);
    // The token cache is isolate memory: cleared, each call below is a fresh isolate's.
    forgetCachedToken(inst);
    await emu('faults', { route: 'token', kind: '429', resetSeconds: 60 });
    expect(await withdrawAfterCommit(pool, keys(), [live[0]!.id])).toEqual({ [live[0]!.id]: 'rate_limited' });
    forgetCachedToken(inst);
    await advanceClocks(pool, 30_000);
    expect(await withdrawAfterCommit(other, keys(), [live[1]!.id])).toEqual({
      [live[1]!.id]: 'rate_limited',
    });
    expect((await tokenCalls(inst.appId)).map((c) => c.status)).toEqual([429]);

    await advanceClocks(pool, 31_000);
    forgetCachedToken(inst);
    const after = await runRemoteRetry(other, { keys: keys(), scope: { workspaceIds: [inst.workspaceId] } });
    expect(after).toMatchObject({ claimed: 2, cleaned: 2 });
    // The pass withdraws its rows side by side, each fetching the cold cache's token: every
    // fetch after the 429 came after its reset.
    const [limited, ...later] = await tokenCalls(inst.appId);
    expect(limited!.status).toBe(429);
    expect(later.length).toBeGreaterThanOrEqual(1);
    for (const c of later) {
      expect(c.status).toBe(200);
      expect(c.at - limited!.at).toBeGreaterThanOrEqual(60_000);
    }
  });

  it('a 429 on the listing of a sweep holds the list route until its reset', async () => {
    const inst = await install();
    const session = uid('s');
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    // Applied, answer lost: the reaction id is unknown, so withdrawal has to list.
    await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
    expect(await addTypingBadge(pool, reg)).toBe('uncertain');
    const ids = await settle(session, 1);
    await emu('faults', { route: 'reactions.list', kind: '429', resetSeconds: 8 });
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(reg)]: 'rate_limited' });
    await advanceClocks(pool, 4000);
    expect(await withdrawAfterCommit(other, keys(), ids)).toEqual({ [registeredId(reg)]: 'rate_limited' });
    expect((await callsTo('reactions.list', inst.appId)).map((c) => c.status)).toEqual([429]);
    await advanceClocks(pool, 4000);
    expect(await withdrawAfterCommit(other, keys(), ids)).toEqual({ [registeredId(reg)]: 'cleaned' });
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
  });
});

describe('retention', () => {
  it('the prune pass deletes reset records whose time has passed and keeps the ones still holding a route', async () => {
    const base = `http://retention-${uid('b')}`;
    await pool.query(
      `insert into lark_rate_limits (api_base, app_id, route, not_before)
       values ($1, 'cli_old', 'reactions.delete', app_now() - interval '1 second'),
              ($1, 'cli_new', 'reactions.delete', app_now() + interval '1 minute')`,
      [base],
    );
    const report = await runPruning(pool);
    expect(report.rateLimitsPruned).toBeGreaterThanOrEqual(1);
    const { rows } = await pool.query<{ app_id: string }>(
      'select app_id from lark_rate_limits where api_base = $1',
      [base],
    );
    expect(rows.map((r) => r.app_id)).toEqual(['cli_new']);
  });
});
