import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { type Agent, echoAgent, setAgentOverride } from '../../workers/agents';
import { TASKLESS_EXPIRY_MS } from '../../workers/typing-ledger/passes/limits';
import {
  type Chat,
  engineSuite,
  fireDebounce,
  host,
  newChat,
  PAST_DEBOUNCE_MS,
  repliesTo,
  sayAwaitable,
  stateOf,
  textOf,
  turns,
  typingOn,
  untilSettled,
  untilWithdrawn,
} from '../channel/helpers';
import { advanceDbClock } from '../helpers/db';
import { emu } from '../lark/helpers';
import { callCounts, runMaintenanceAlarm } from './helpers';

/**
 * Spec: "A taskless indicator expires two minutes after registration. This recovers the badge
 * when a hard crash loses an in-memory debounce timer after Add succeeds. It does not settle
 * the input […]; the channel engine can process that input on subsequent traffic. […] Inputs
 * with active tasks and newer inputs keep their own indicators."
 *
 * End to end: signed Lark events through the Worker's fetch handler, the emulator, the
 * conversation's ActorHost, and the real TypingMaintenance Durable Object alarm (the 30-second
 * pass: expiry, then the retry pass that withdraws). Time moves with the database test clock.
 *
 * Events go through `sayAwaitable`: the Worker's own default export `fetch` (what
 * `exports.default.fetch` reaches) with an ExecutionContext of the test's, so the test awaits
 * what the webhook left in `waitUntil` (the host's wake-up and the Typing Add). Through
 * `exports.default.fetch` that work runs unobserved, and a wake-up arriving after the test
 * wiped the host (below) would re-arm it.
 */
const suite = engineSuite();
const { pool } = suite;

/** Polls `done` (a flag in this isolate's memory) every 10 ms; never a fixed sleep. */
async function until(done: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const started = Date.now();
  while (!done()) {
    if (Date.now() - started > timeoutMs) throw new Error(`${what} did not happen`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * The echo agent, except for one conversation whose reply waits until the test opens the
 * gate (or the agent's own timeout aborts it). Plain flags, not promises: a promise resolved
 * inside the ActorHost's request runs the test's continuation there, where the test's own
 * database connection cannot be used ("Cannot perform I/O on behalf of a different Durable
 * Object"; seen on the first version of this test), and the other way round for the agent.
 */
function gatedAgentFor(sessionId: string) {
  const gate = { entered: false, open: false };
  const agent: Agent = {
    name: 'gated-echo',
    async reply(turn, signal) {
      if (turn.sessionId === sessionId) {
        gate.entered = true;
        await until(() => gate.open || signal.aborted, 'the gate opening', 60_000);
        signal.throwIfAborted();
      }
      return echoAgent.reply(turn, signal);
    },
  };
  return {
    agent,
    untilEntered: () => until(() => gate.entered, 'the agent starting its reply'),
    release: () => {
      gate.open = true;
    },
  };
}

interface LedgerRow {
  id: string;
  add_state: string;
  taskless: boolean;
  settled_by: string | null;
  retention_outcome: string | null;
  cleaned_at: Date | null;
  attempts: number;
  age_ms: number;
}

const ledgerRow = async (messageId: string): Promise<LedgerRow> =>
  (
    await pool.query<LedgerRow>(
      `select id, add_state, taskless, settled_by, retention_outcome, cleaned_at, attempts,
              ceil(extract(epoch from app_now() - created_at) * 1000)::int as age_ms
         from channel_typing_reaction where source_message_id = $1`,
      [messageId],
    )
  ).rows[0]!;

/** The conversation's own durable record: its timer and unprocessed inputs. */
async function actorRecord(chat: Chat) {
  const { rows } = await pool.query<{ wake_at_ms: string | null; pending_messages: number }>(
    `select i.wake_at_ms,
            (select count(*)::int from actor_mailbox m
              where m.instance_id = i.id and m.state = 'pending') as pending_messages
       from actor_instances i where i.id = $1`,
    [chat.sessionId],
  );
  return rows[0]!;
}

describe('taskless crash recovery through the real passes', { timeout: 90_000 }, () => {
  it('a badge whose debounce timer was lost goes two minutes after registration; a fresh input and a running turn keep theirs; new traffic still answers the lost input', async () => {
    const crashed = newChat(suite.app);
    const running = newChat(suite.app);
    const fresh = newChat(suite.app);
    const gate = gatedAgentFor(running.sessionId);
    setAgentOverride(gate.agent);

    // t = 0: a conversation whose turn will be running when the passes run (its agent still
    // working), registered before the lost input so it is past two minutes first.
    const busy = await sayAwaitable(running, 'a long question');
    await busy.afterAnswer;
    await advanceDbClock(pool, 5000);

    // t = 5 s: the input whose timer will be lost. The webhook's waitUntil woke the host (the
    // debounce timer is armed) and the Add landed.
    const lost = await sayAwaitable(crashed, 'first, before the crash');
    await lost.afterAnswer;
    expect(await typingOn(lost.messageId)).toBe(1);
    expect(await ledgerRow(lost.messageId)).toMatchObject({ add_state: 'added', taskless: true });
    const planned = await runInDurableObject(host(crashed), (_, state) => state.storage.get('alarm:planned'));
    expect(planned).toEqual(expect.any(Number));

    // The crash: the conversation's ActorHost loses its memory and its alarm (storage wiped,
    // alarm deleted), so its debounce timer never fires. The conversation's durable timer
    // (actor_instances.wake_at_ms) is still there: the minute cron's mailbox poll is the
    // runtime's own recovery for a lost alarm, and it is not run here. This is the case the
    // spec's two-minute expiry exists for: no wake-up ever reaches the conversation (the
    // spec's in-memory timer, gone; here: host and poll both missing it). Nothing else may
    // remove the badge: no turn starts, no other host serves this conversation.
    await runInDurableObject(host(crashed), async (_, state) => {
      await state.storage.deleteAlarm();
      await state.storage.deleteAll();
    });
    expect(await runDurableObjectAlarm(host(crashed))).toBe(false); // nothing left to fire

    // t = 21 s: the running turn's debounce is due.
    await advanceDbClock(pool, PAST_DEBOUNCE_MS - 5000);
    // Its debounce fires: the flush (turn row, inputs marked tasked) commits, then the reply
    // effect starts and the agent blocks until released. Not awaited: the pump is in flight.
    const busyPump = runDurableObjectAlarm(host(running));
    await gate.untilEntered();
    expect(await ledgerRow(busy.messageId)).toMatchObject({ add_state: 'added', taskless: false });
    expect(await turns(pool, running)).toMatchObject([{ turn_no: 1, outcome: null }]);

    // t ≈ 61 s: a third conversation's input, taskless (its debounce is not due yet).
    await advanceDbClock(pool, 40_000);
    const newer = await sayAwaitable(fresh, 'just now');
    await newer.afterAnswer;
    expect(await ledgerRow(newer.messageId)).toMatchObject({ add_state: 'added', taskless: true });

    // Two seconds before the lost input's two minutes: the pass leaves every badge.
    await advanceDbClock(pool, TASKLESS_EXPIRY_MS - 2000 - (await ledgerRow(lost.messageId)).age_ms);
    await emu('calls', undefined, 'DELETE');
    const early = await runMaintenanceAlarm();
    expect(early.expire).toMatchObject({ tasklessExpired: 0, expired: 0 });
    expect(await typingOn(lost.messageId)).toBe(1);

    // Two minutes after registration: the next pass expires the lost input's indicator and
    // its retry step withdraws the badge; the fresh input and the running turn keep theirs.
    await advanceDbClock(pool, 2000);
    expect((await ledgerRow(lost.messageId)).age_ms).toBeGreaterThanOrEqual(TASKLESS_EXPIRY_MS);
    expect((await ledgerRow(newer.messageId)).age_ms).toBeLessThan(TASKLESS_EXPIRY_MS);
    // Older than the lost input: only its task keeps its badge.
    expect((await ledgerRow(busy.messageId)).age_ms).toBeGreaterThan(TASKLESS_EXPIRY_MS + 4000);
    const pass = await runMaintenanceAlarm();
    expect(pass.expire).toMatchObject({ tasklessExpired: 1, expired: 0 });
    expect(pass.retry).toMatchObject({ claimed: 1, cleaned: 1 });
    expect(await typingOn(lost.messageId)).toBe(0);
    expect(await typingOn(newer.messageId)).toBe(1);
    expect(await typingOn(busy.messageId)).toBe(1);
    expect((await callCounts())['reactions.delete']).toBe(1);
    const expired = await ledgerRow(lost.messageId);
    expect(expired).toMatchObject({
      settled_by: 'maintenance:taskless_expiry',
      retention_outcome: 'taskless_expired',
    });
    expect(expired.cleaned_at).not.toBeNull();
    expect(await ledgerRow(newer.messageId)).toMatchObject({ settled_by: null, cleaned_at: null });
    expect(await ledgerRow(busy.messageId)).toMatchObject({ settled_by: null, cleaned_at: null });
    // The input itself is not settled: still pending in its conversation, no turn, its durable
    // timer and record untouched, no settlement cutoff written.
    const waiting = await stateOf(pool, crashed);
    expect(waiting.pending.map((p) => p.messageId)).toEqual([lost.messageId]);
    expect(waiting.turn).toBeNull();
    expect(await turns(pool, crashed)).toEqual([]);
    expect(await actorRecord(crashed)).toMatchObject({ wake_at_ms: expect.any(String), pending_messages: 0 });
    const { rows: cutoffs } = await pool.query(
      'select 1 from channel_typing_settlement where session_id = $1',
      [crashed.sessionId],
    );
    expect(cutoffs).toEqual([]);

    // The running turn ends on its own terms: reply delivered, its badge withdrawn by the turn.
    gate.release();
    await busyPump;
    expect(await untilSettled(pool, running, 1)).toMatchObject({ outcome: 'delivered' });
    await untilWithdrawn(running, [busy.messageId]);
    expect((await repliesTo(busy.messageId)).map(textOf)).toEqual(['echo: a long question']);

    // New traffic in the crashed conversation: its host wakes again, and the turn covers the
    // lost input too. The expired input gets no new badge and no second withdrawal.
    await emu('calls', undefined, 'DELETE');
    const next = await sayAwaitable(crashed, 'second, after the crash');
    await next.afterAnswer;
    const turn = await untilSettled(pool, crashed, 1);
    expect(turn).toMatchObject({ outcome: 'delivered', input_count: 2, anchor_message_id: next.messageId });
    expect((await repliesTo(next.messageId)).map(textOf)).toEqual([
      'echo (2): first, before the crash | second, after the crash',
    ]);
    await untilWithdrawn(crashed, [lost.messageId, next.messageId]);
    expect((await callCounts())['reactions.create']).toBe(1); // the new input's badge only
    const after = await ledgerRow(lost.messageId);
    expect(after).toMatchObject({
      settled_by: 'maintenance:taskless_expiry',
      cleaned_at: expired.cleaned_at,
      attempts: expired.attempts,
    });
    expect((await stateOf(pool, crashed)).pending).toEqual([]);

    // And the fresh input gets its turn when its own debounce fires.
    await fireDebounce(pool, fresh);
    expect(await untilSettled(pool, fresh, 1)).toMatchObject({ outcome: 'delivered' });
    await untilWithdrawn(fresh, [newer.messageId]);
    expect((await repliesTo(newer.messageId)).map(textOf)).toEqual(['echo: just now']);
  });
});
