import { runDurableObjectAlarm } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { setAgentOverride } from '../../workers/agents';
import { insertTurn, settleTurnRow } from '../../workers/channel/turns';
import {
  afterTurnSettled,
  markTurnInputsTasked,
  settleTurnInputs,
  type TurnOutcome,
  type TurnSettlement,
} from '../../workers/channel/typing-hooks';
import { withTx } from '../../workers/db/tx';
import { registerProcess } from '../../workers/effects/processes';
import { runRecoveryPass } from '../../workers/effects/recovery';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance } from '../../workers/effects/runner';
import { claimEffects } from '../../workers/effects/scheduler';
import { effectConfig } from '../../workers/effects/types';
import { loadConfig } from '../../workers/env';
import { runMaintenancePasses } from '../../workers/typing-ledger/maintenance-passes';
import { ageHeartbeat } from '../effects/helpers';
import { advanceDbClock, uid } from '../helpers/db';
import { admin, buildEvent, emu, installApp, releaseHeld, type TestApp, untilHeld } from '../lark/helpers';
import { keys } from '../typing-ledger/helpers';
import {
  type Chat,
  engineSuite,
  host,
  newChat,
  PAST_DEBOUNCE_MS,
  pump,
  sayAwaitable,
  submitAwaitable,
  turns,
  untilSettled,
} from './helpers';

/**
 * A late Add racing the end of its turn (spec: "an Add returning after another replica
 * observes termination cannot restore an active state"; "later inputs do not authorize
 * cleanup of the wrong turn"). Lark holds the Add of input M1 (emulator `hold` fault on
 * reactions.create) while its turn ends; when Lark finally answers, exactly one delete
 * removes that late badge, a human's `Typing` on M1 stays, and the next turn's input keeps
 * its own badge. Deletes are counted in the emulator's call log, per message.
 */
const suite = engineSuite();
const { pool } = suite;
const config = () => loadConfig(env as never);

interface Call {
  route: string;
  messageId?: string;
  status: number | 'dropped';
}
const callsOn = async (messageId: string, route: string) =>
  (await emu<{ calls: Call[] }>(`calls?route=${route}&message_id=${encodeURIComponent(messageId)}`)).calls;

interface EmuReaction {
  reaction_id: string;
  operator: { operator_id: string; operator_type: string };
  reaction_type: { emoji_type: string };
}
const typingOn = async (messageId: string) =>
  (await emu<{ items: EmuReaction[] }>(`messages/${messageId}/reactions`)).items.filter(
    (r) => r.reaction_type.emoji_type === 'Typing',
  );
/** The `Typing` reactions on a message, as `app:<id>` / `user:<id>`, sorted. */
const typingBy = async (messageId: string) =>
  (await typingOn(messageId)).map((r) => `${r.operator.operator_type}:${r.operator.operator_id}`).sort();

async function ledgerRow(messageId: string) {
  const { rows } = await pool.query<{
    add_state: string;
    settled_at: Date | null;
    settle_outcome: string | null;
    cleaned_at: Date | null;
    credential_snapshot: string | null;
    quota_slot: number | null;
  }>(
    `select add_state, settled_at, settle_outcome, cleaned_at, credential_snapshot, quota_slot
       from channel_typing_reaction where source_message_id = $1`,
    [messageId],
  );
  return rows[0]!;
}

async function inputOf(messageId: string) {
  const { rows } = await pool.query<{ position: string; context_revision: string }>(
    'select position, context_revision from lark_inbound_messages where message_id = $1',
    [messageId],
  );
  return { position: Number(rows[0]!.position), revision: Number(rows[0]!.context_revision) };
}

/**
 * The engine's fenced commits for a one-input turn, through the same functions the
 * conversation actor calls: the flush (turn row, inputs tasked) and the terminal
 * transaction (outcome, then the ledger settlement). Returns what the
 * `channel.turn-settled` effect receives.
 */
async function endTurn(chat: Chat, anchorMessageId: string, outcome: TurnOutcome): Promise<TurnSettlement> {
  const input = await inputOf(anchorMessageId);
  const { rows } = await pool.query<{ workspace_id: string }>(
    'select workspace_id from lark_installations where id = $1',
    [chat.app.installationId],
  );
  const settlement: TurnSettlement = {
    sessionId: chat.sessionId,
    installationId: chat.app.installationId,
    workspaceId: rows[0]!.workspace_id,
    appId: chat.app.appId,
    turnNo: 1,
    contextRevision: input.revision,
    cutoffPosition: input.position,
    positions: [input.position],
    messageIds: [anchorMessageId],
    anchorMessageId,
    outcome,
    replyMessageId: outcome === 'delivered' ? `om_${uid('r').slice(2)}` : null,
  };
  const turn = { sessionId: chat.sessionId, contextRevision: input.revision, cutoffPosition: input.position };
  await withTx(pool, { budgetMs: 5000 }, async (tx) => {
    await insertTurn(tx, {
      ...turn,
      turnNo: 1,
      firstPosition: input.position,
      inputCount: 1,
      anchorMessageId,
      deliveryKey: crypto.randomUUID(),
      effectId: crypto.randomUUID(),
    });
    await markTurnInputsTasked(tx, turn);
  });
  await withTx(pool, { budgetMs: 5000 }, async (tx) => {
    if (await settleTurnRow(tx, chat.sessionId, 1, outcome, settlement.replyMessageId))
      await settleTurnInputs(tx, settlement);
  });
  return settlement;
}

const OTHER_APP = 'cli_anotherbot';
/** A human's `Typing` on the message (Lark lets users add any emoji), and another bot's. */
async function foreignTyping(messageId: string): Promise<string[]> {
  const human = `ou_${uid('h').slice(2)}`;
  await emu(`messages/${messageId}/reactions`, { emoji_type: 'Typing', user_open_id: human });
  await emu(`messages/${messageId}/reactions`, { emoji_type: 'Typing', app_id: OTHER_APP });
  return [`app:${OTHER_APP}`, `user:${human}`].sort();
}

/** The same app installed again (its former installation deleted): a new installation id. */
async function reinstall(app: TestApp, workspaceId: string): Promise<TestApp> {
  const res = await admin('', {
    body: {
      workspace_id: workspaceId,
      app_id: app.appId,
      app_secret: app.appSecret,
      verification_token: app.verificationToken,
      encrypt_key: app.encryptKey,
    },
  });
  expect(res.status).toBe(201);
  const { installation } = (await res.json()) as { installation: { id: string } };
  return { ...app, installationId: installation.id };
}

type Ending = TurnOutcome | 'installation_deleted';
const ENDINGS: Ending[] = ['delivered', 'failed', 'retired', 'anchor_gone', 'installation_deleted'];

// The turn ends through the engine's own commit functions (endTurn), not the running engine:
// Lark's answer must reach the Add inside its two-second budget, and a real turn (debounce,
// agent, dead workers for `retired`) does not fit that window reliably. The block below runs
// the real engine with the Add outliving its budget instead.
describe('an Add that Lark answers after its turn ended (terminal commit through the engine hooks)', {
  timeout: 60_000,
}, () => {
  it.each(ENDINGS)(
    '%s: exactly one delete of the late badge; a human’s and another bot’s Typing kept; the next input keeps its own',
    async (ending) => {
      // Deleting an installation must not take the suite's app with it.
      const app = ending === 'installation_deleted' ? await installApp() : suite.app;
      const chat = newChat(app);
      const m1 = await buildEvent(app, {
        message: { text: 'late badge', chat_id: chat.chatId, chat_type: 'group' },
      });
      const m1Id = m1.message_id!;
      const foreign = await foreignTyping(m1Id);
      await emu('faults', { route: 'reactions.create', kind: 'hold' });
      const { afterAnswer: m1Add } = await submitAwaitable(app, m1.request);
      await untilHeld('reactions.create');
      // From here Lark holds M1's Add: the turn ends before Lark answers (within the Add's
      // own two-second budget, so the answer still reaches the Add).

      let next: { app: TestApp; messageId: string } | undefined;
      let settlement: TurnSettlement | undefined;
      if (ending === 'installation_deleted') {
        const { workspace_id } = (
          await pool.query<{ workspace_id: string }>(
            'select workspace_id from lark_installations where id = $1',
            [app.installationId],
          )
        ).rows[0]!;
        expect((await admin(`/${app.installationId}`, { method: 'DELETE' })).status).toBe(200);
        expect(await releaseHeld()).toEqual({ released: 1 });
        await m1Add;
        // The same app installed again: its new conversation's input keeps its badge.
        const again = await reinstall(app, workspace_id);
        const s = await sayAwaitable(newChat(again), 'after the reinstall');
        await s.afterAnswer;
        next = { app: again, messageId: s.messageId };
      } else {
        // While Lark holds the Add: the next turn's input is recorded (position past turn 1's
        // cutoff), then turn 1 ends while that input's own Add runs; the turn-settled effect
        // runs first and leaves the in-flight Add to the Add itself. Side by side, to stay well
        // inside the Add's two-second budget.
        const s = await sayAwaitable(chat, 'next turn');
        [settlement] = await Promise.all([
          endTurn(chat, m1Id, ending).then(async (x) => {
            await afterTurnSettled(config(), x);
            return x;
          }),
          s.afterAnswer,
        ]);
        next = { app, messageId: s.messageId };
        expect(await callsOn(m1Id, 'reactions.delete')).toEqual([]);
        expect(await releaseHeld()).toEqual({ released: 1 });
        await m1Add;
      }

      // Lark's late answer reached the Add: it recorded the reaction, saw the end and deleted it.
      const row = await ledgerRow(m1Id);
      expect(
        row.add_state,
        "the Add ran out of its two-second budget before the release: the race wasn't run",
      ).not.toBe('uncertain');
      expect(row).toMatchObject({ add_state: 'added', credential_snapshot: null, quota_slot: null });
      expect(row.cleaned_at).not.toBeNull();
      if (settlement) expect(row).toMatchObject({ settle_outcome: ending });
      expect(await callsOn(m1Id, 'reactions.create')).toEqual([expect.objectContaining({ status: 200 })]);
      expect(await callsOn(m1Id, 'reactions.delete')).toEqual([expect.objectContaining({ status: 200 })]);
      expect(await typingBy(m1Id)).toEqual(foreign);

      // A retry of the turn-settled effect (at most 3 attempts) finds nothing left to do.
      if (settlement) await afterTurnSettled(config(), settlement);
      expect(await callsOn(m1Id, 'reactions.delete')).toHaveLength(1);

      // The next input's badge is its own: untouched by the late Add and the settlement.
      expect(await typingBy(next.messageId)).toEqual([`app:${next.app.appId}`]);
      expect(await callsOn(next.messageId, 'reactions.delete')).toEqual([]);
      const nextRow = await ledgerRow(next.messageId);
      expect(nextRow).toMatchObject({ add_state: 'added', settled_at: null, cleaned_at: null });
    },
  );
});

/** An agent that always fails: every generation of the reply fails until the turn does. */
const failingAgent = {
  name: 'failing',
  reply: async () => {
    throw new Error('agent unavailable');
  },
};

/** A worker claims the turn's due reply generation (and will die silently). */
async function doomedClaim(chat: Chat): Promise<string> {
  const dead = await registerProcess(pool, 'doomed-worker');
  const claimed = await claimEffects(pool, dead, { limit: 10, instanceId: chat.sessionId });
  expect(claimed.map((e) => e.kind)).toEqual(['channel.reply']);
  return dead;
}

/**
 * Retires turn 1 through the real recovery path: each of its three reply generations is
 * claimed by a worker that dies silently (the first already is: `dead`); the recovery pass
 * retires it and the actor starts the next generation, and after the last one the turn
 * settles `retired`.
 */
async function retireTurn(chat: Chat, dead: string) {
  for (let generation = 1; generation <= 3; generation++) {
    const worker = generation === 1 ? dead : await doomedClaim(chat);
    await ageHeartbeat(pool, worker, 31_000);
    expect((await runRecoveryPass(pool, effectConfig())).retired).toBeGreaterThanOrEqual(1);
    await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig()); // the recovery message
  }
}

/** Runs the host until the turn-settled effect of the session has completed. */
async function untilSettledEffectDone(chat: Chat, rounds = 6) {
  for (let i = 0; i < rounds; i++) {
    const { rows } = await pool.query<{ status: string }>(
      `select status from effects where origin_instance_id = $1 and kind = 'channel.turn-settled'`,
      [chat.sessionId],
    );
    if (rows.length > 0 && rows.every((r) => r.status === 'completed')) return;
    await runDurableObjectAlarm(host(chat));
    await pump(chat);
  }
  throw new Error(`the turn-settled effect of ${chat.sessionId} did not complete`);
}

/** Polls the call log until Lark has applied the released Add (the client is long gone). */
async function untilApplied(messageId: string) {
  for (let i = 0; i < 200; i++) {
    if ((await callsOn(messageId, 'reactions.create')).some((c) => c.status === 200)) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`the held Add on ${messageId} was never applied`);
}

describe('an Add that Lark applies after the client gave up and after the turn ended (real engine)', {
  timeout: 90_000,
}, () => {
  it.each(ENDINGS)(
    '%s: the late badge is found and deleted exactly once by the real passes; a human’s and another bot’s Typing kept; the next input keeps its own',
    async (ending) => {
      const app = ending === 'installation_deleted' ? await installApp() : suite.app;
      const chat = newChat(app);
      const { workspace_id: workspaceId } = (
        await pool.query<{ workspace_id: string }>(
          'select workspace_id from lark_installations where id = $1',
          [app.installationId],
        )
      ).rows[0]!;
      const m1 = await buildEvent(app, {
        message: { text: 'late badge', chat_id: chat.chatId, chat_type: 'group' },
      });
      const m1Id = m1.message_id!;
      const foreign = await foreignTyping(m1Id);
      await emu('faults', { route: 'reactions.create', kind: 'hold' });
      const { afterAnswer: m1Add } = await submitAwaitable(app, m1.request);
      await untilHeld('reactions.create');
      // The Add gives up at its two-second budget: nothing is known, the row is uncertain.
      await m1Add;
      expect((await ledgerRow(m1Id)).add_state).toBe('uncertain');

      let next: { app: TestApp; messageId: string };
      if (ending === 'installation_deleted') {
        expect((await admin(`/${app.installationId}`, { method: 'DELETE' })).status).toBe(200);
        expect(await releaseHeld()).toEqual({ released: 1 });
        await untilApplied(m1Id); // Lark applies the Add now: a badge nobody is waiting for
        // Past the two-minute taskless expiry; the same app is installed again and its new
        // conversation gets an input (and a badge) before the passes run.
        await advanceDbClock(pool, 3 * 60_000);
        const again = await reinstall(app, workspaceId);
        const s = await sayAwaitable(newChat(again), 'after the reinstall');
        await s.afterAnswer;
        next = { app: again, messageId: s.messageId };
      } else {
        if (ending === 'anchor_gone') {
          // A second input becomes the turn's anchor; its sender recalls it before the reply.
          const anchor = await sayAwaitable(chat, 'recalled soon');
          await anchor.afterAnswer;
          await emu(`messages/${anchor.messageId}/recall`, {});
        }
        if (ending === 'failed') setAgentOverride(failingAgent);
        // The flush alone: turn 1 starts and covers the inputs so far.
        await advanceDbClock(pool, PAST_DEBOUNCE_MS);
        await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
        expect((await turns(pool, chat)).map((t) => t.outcome)).toEqual([null]);
        // Retiring: a worker claims the first generation before anyone else can run it.
        const doomed = ending === 'retired' ? await doomedClaim(chat) : undefined;
        // The next turn's input arrives while turn 1 runs (its wake-up lets the host run the
        // reply); its badge is its own.
        const s = await sayAwaitable(chat, 'next turn');
        await s.afterAnswer;
        next = { app, messageId: s.messageId };
        if (doomed) await retireTurn(chat, doomed);
        // Short steps: turn 2's debounce (20 s after the next input) must not start meanwhile.
        const turn = await untilSettled(pool, chat, 1, 2500);
        expect(turn.outcome).toBe(ending);
        expect((await ledgerRow(m1Id)).settle_outcome).toBe(ending);
        // The turn-settled effect: its sweep finds nothing yet (Lark still holds the Add), and
        // an empty sweep of an unfinished Add acknowledges nothing.
        await untilSettledEffectDone(chat);
        expect((await ledgerRow(m1Id)).cleaned_at).toBeNull();
        setAgentOverride(null);
        expect((await ledgerRow(next.messageId)).settled_at).toBeNull();
        expect(await releaseHeld()).toEqual({ released: 1 });
        await untilApplied(m1Id);
        await advanceDbClock(pool, 31_000); // the withdrawal's retry is due
      }
      expect(await typingBy(m1Id)).toContain(`app:${app.appId}`);
      expect(await callsOn(m1Id, 'reactions.delete')).toEqual([]);

      // The real 30-second maintenance run (expiry, pruning, remote retry) for this workspace.
      const report = await runMaintenancePasses(pool, {
        keys: keys(),
        scope: { workspaceIds: [workspaceId] },
      });
      expect(report.retry).toMatchObject({ cleaned: 1, errors: 0 });
      expect(await callsOn(m1Id, 'reactions.delete')).toEqual([expect.objectContaining({ status: 200 })]);
      expect(await typingBy(m1Id)).toEqual(foreign);
      expect((await ledgerRow(m1Id)).cleaned_at).not.toBeNull();

      // Another run 31 s later finds nothing left: still exactly one delete. (The next input
      // is still inside its two-minute taskless window, so its badge must be there.)
      await advanceDbClock(pool, 31_000);
      await runMaintenancePasses(pool, { keys: keys(), scope: { workspaceIds: [workspaceId] } });
      expect(await callsOn(m1Id, 'reactions.delete')).toHaveLength(1);
      expect(await typingBy(next.messageId)).toEqual([`app:${next.app.appId}`]);
      expect(await callsOn(next.messageId, 'reactions.delete')).toEqual([]);
      if (ending !== 'installation_deleted') expect(await turns(pool, chat)).toHaveLength(1);
    },
  );
});
