import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import type { Installation } from '../../workers/installations/store';
import { addTypingBadge, settleTurnInputs, withdrawAfterCommit } from '../../workers/typing-ledger';
import { runRemoteRetry } from '../../workers/typing-ledger/passes/retry';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';
import { emu, releaseHeld, untilHeld } from '../lark/helpers';
import { quietEmulator, trackWorkspaces } from '../typing-maintenance/helpers';
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
 * Issue 28: the last ways a typing badge is left behind, re-driven or lost. Each test was
 * seen failing on the code before its fix (docs/typing-ledger.md "Issue 28").
 */
let pool: Pool;
/** Another isolate (the after-commit effect of the settling replica). */
let other: Pool;
const { track, dropAll } = trackWorkspaces();

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

describe('hole 1: adoption after a concurrent settlement', () => {
  it('adopt.settled_meanwhile_keeps_schedule: the retry pass finds the badge after the turn settled and its after-commit listing was held by a 429: the row keeps a next attempt and the first pass after the reset deletes the badge', async () => {
    const inst = await install();
    const session = uid('s');
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    const id = registeredId(reg);
    // Applied at Lark, answer lost: uncertain, no reaction id, claimable after a minute.
    await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
    expect(await addTypingBadge(pool, reg)).toBe('uncertain');
    await advanceClocks(pool, 61_000);

    // The retry pass claims the unsettled row (resolve mode) and its listing is held.
    await emu('faults', { route: 'reactions.list', kind: 'hold' });
    const pass = runRemoteRetry(pool, { keys: keys(), scope: scopeOf(inst) });
    await untilHeld('reactions.list');

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
