import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Deadline } from '../../workers/clock';
import { withTx } from '../../workers/db/tx';
import { deleteInstallation, type Installation } from '../../workers/installations/store';
import { LarkClient } from '../../workers/lark/client';
import {
  addTypingBadge,
  type Registration,
  registerInput,
  settledRowIds,
  settleTurnInputs,
  withdrawAfterCommit,
  withdrawRow,
} from '../../workers/typing-ledger';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';
import { emu, releaseHeld, untilHeld } from '../lark/helpers';
import {
  captureLogs,
  keys,
  makeInstallation,
  newMessage,
  reactionsOn,
  register,
  registeredId,
  row,
  typingOf,
} from './helpers';

let pool: Pool;
const logs = captureLogs();
const secrets: string[] = [];

beforeAll(() => {
  pool = testPool(24);
});
afterEach(async () => {
  await emu('faults', undefined, 'DELETE');
  await setDbClockOffset(pool, 0);
});
afterAll(async () => {
  await pool.end();
});

async function install(workspaceId?: string): Promise<Installation> {
  const inst = await makeInstallation(pool, workspaceId);
  secrets.push(inst.appSecret);
  return inst;
}

function settle(sessionId: string, cutoff: number, opts: { revision?: number } = {}) {
  return withTx(pool, { budgetMs: 3000 }, (tx) =>
    settleTurnInputs(tx, {
      sessionId,
      contextRevision: opts.revision ?? 0,
      cutoffPosition: cutoff,
      settledBy: 'turn:test',
      outcome: 'delivered',
    }),
  );
}

describe('register before Add', () => {
  it('a registration that rolls back leaves no row, so no Add can be sent', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const session = uid('s');
    let reg: Registration | undefined;
    await expect(
      withTx(pool, { budgetMs: 3000 }, async (tx) => {
        reg = await registerInput(tx, keys(), {
          installation: inst,
          sessionId: session,
          messageId,
          inputPosition: 1,
          contextRevision: 0,
          receivedAtMs: Date.now(),
        });
        throw new Error('webhook transaction failed after registration');
      }),
    ).rejects.toThrow();
    expect(reg?.kind).toBe('registered');
    const { rows } = await pool.query('select 1 from channel_typing_reaction where session_id = $1', [
      session,
    ]);
    expect(rows).toHaveLength(0);
    // The webhook hands out a registration only after commit; nothing reached Lark.
    expect(await reactionsOn(messageId)).toHaveLength(0);
  });

  it('a message older than two minutes on arrival gets no row and no Add', async () => {
    const inst = await install();
    const reg = await register(pool, inst, {
      sessionId: uid('s'),
      messageId: await newMessage(),
      position: 1,
      createdAtMs: Date.now() - 121_000,
    });
    expect(reg).toEqual({ kind: 'skipped', reason: 'stale_message' });
  });

  it('many concurrent registrations for the last quota slot: exactly one wins, the others skip the Add', async () => {
    const inst = await install();
    await pool.query(
      `insert into channel_typing_reaction (id, workspace_id, installation_id, app_id, session_id,
         source_message_id, input_position, context_revision, quota_slot, expires_at)
       select 'fill_' || $1 || s, $2, $3, $4, 'fill', 'om_fill_' || $1 || s, s, 0, s, app_now() + interval '7 days'
       from generate_series(1, 999) s`,
      [uid('f'), inst.workspaceId, inst.id, inst.appId],
    );
    const session = uid('s');
    const messages = await Promise.all(Array.from({ length: 12 }, () => newMessage()));
    const regs = await Promise.all(
      messages.map((messageId, i) =>
        register(pool, inst, { sessionId: session, messageId, position: i + 1 }),
      ),
    );
    const winners = regs.filter((r) => r.kind === 'registered');
    expect(winners).toHaveLength(1);
    for (const r of regs) if (r.kind === 'skipped') expect(['quota_full', 'contended']).toContain(r.reason);
    expect(logs.some((l) => l.includes('typing_add_skipped'))).toBe(true);
    // The winner's Add goes out; the losers' inputs are not blocked (their transactions committed).
    expect(await addTypingBadge(pool, winners[0]!)).toBe('added');
    const { rows } = await pool.query(
      'select count(*)::int as n from channel_typing_reaction where workspace_id = $1 and quota_slot is not null',
      [inst.workspaceId],
    );
    expect(rows[0].n).toBe(1000);
    await pool.query(`delete from channel_typing_reaction where session_id = 'fill' and workspace_id = $1`, [
      inst.workspaceId,
    ]);
  });
});

describe('Add, monotonic', () => {
  it('an Add returning after another replica observed termination cannot restore an active state', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const session = uid('s');
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    // Lark holds the Add until released; its budget is raised so only the release ends it.
    await emu('faults', { route: 'reactions.create', kind: 'hold' });
    const adding = addTypingBadge(pool, reg, { addBudgetMs: 10_000 });
    await untilHeld('reactions.create');
    // Another replica settles the turn while the Add is in flight.
    const ids = await settle(session, 1);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(reg)]: 'left_to_add' });
    expect(await releaseHeld()).toEqual({ released: 1 });
    expect(await adding).toBe('withdrawn_after_add');
    const r = await row(pool, registeredId(reg));
    expect(r.settled_at).not.toBeNull();
    expect(r.add_state).toBe('added');
    expect(r.reaction_id).toMatch(/./);
    expect(r.cleaned_at).not.toBeNull();
    expect(r.credential_snapshot).toBeNull();
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
  });

  it('revalidation after a successful Add withdraws at once when the installation is gone', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    await deleteInstallation(pool, inst.id);
    expect(await addTypingBadge(pool, reg)).toBe('withdrawn_after_add');
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
  });

  it('revalidation that fails (engine check throws) withdraws the badge at once', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    const out = await addTypingBadge(pool, reg, {
      isInputLive: async () => {
        throw new Error('engine unavailable');
      },
    });
    expect(out).toBe('withdrawn_after_add');
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
  });

  it('"applied but response lost": the uncertain Add is resolved by a sweep after settlement', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const session = uid('s');
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
    expect(await addTypingBadge(pool, reg)).toBe('uncertain');
    expect(await typingOf(messageId, inst.appId)).toHaveLength(1);
    const ids = await settle(session, 1);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(reg)]: 'cleaned' });
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
    expect((await row(pool, registeredId(reg))).credential_snapshot).toBeNull();
  });

  it('a crash between the Add and recording its reaction id is resolved by a sweep once the turn settles, a minute after registration', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const session = uid('s');
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    // The Add reached Lark, then the process died before recordAdded.
    await new LarkClient({
      baseUrl: inst.apiBase,
      appId: inst.appId,
      appSecret: inst.appSecret,
    }).createReaction(messageId, 'Typing', { deadline: new Deadline(2000) });
    const ids = await settle(session, 1);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(reg)]: 'left_to_add' });
    await advanceDbClock(pool, 61_000);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(reg)]: 'cleaned' });
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
  });

  it('an unsettled uncertain Add found by a sweep is adopted, not removed (the turn still runs)', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
    await addTypingBadge(pool, reg);
    const { rows } = await pool.query(
      `select *, expires_at <= app_now() as past_retention from channel_typing_reaction where id = $1`,
      [registeredId(reg)],
    );
    const out = await withdrawRow(pool, keys(), rows[0], { deadline: new Deadline(2000) });
    expect(out.outcome).toBe('adopted');
    const r = await row(pool, registeredId(reg));
    expect(r.add_state).toBe('added');
    expect(r.reaction_id).toBe((await typingOf(messageId, inst.appId))[0]!.reaction_id);
  });

  it('an empty sweep cannot acknowledge an unfinished Add before its retention deadline', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const session = uid('s');
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    const ids = await settle(session, 1); // the Add has not even been sent (in flight elsewhere)
    await advanceDbClock(pool, 61_000);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(reg)]: 'unconfirmed' });
    const r = await row(pool, registeredId(reg));
    expect(r.cleaned_at).toBeNull();
    expect(r.credential_snapshot).not.toBeNull();
    expect(r.next_attempt_at).not.toBeNull();
  });
});

describe('settlement', () => {
  it('three coalesced inputs are all cleaned; a later input keeps its badge', async () => {
    const inst = await install();
    const session = uid('s');
    const msgs = await Promise.all([1, 2, 3, 4].map(() => newMessage()));
    const regs: Registration[] = [];
    for (const [i, m] of msgs.entries())
      regs.push(await register(pool, inst, { sessionId: session, messageId: m, position: i + 1 }));
    for (const r of regs) expect(await addTypingBadge(pool, r)).toBe('added');
    const ids = await settle(session, 3);
    expect(ids.sort()).toEqual(regs.slice(0, 3).map(registeredId).sort());
    const out = await withdrawAfterCommit(pool, keys(), ids);
    expect(Object.values(out)).toEqual(['cleaned', 'cleaned', 'cleaned']);
    for (const m of msgs.slice(0, 3)) expect(await typingOf(m, inst.appId)).toHaveLength(0);
    expect(await typingOf(msgs[3]!, inst.appId)).toHaveLength(1);
    const later = await row(pool, registeredId(regs[3]!));
    expect(later.settled_at).toBeNull();
    expect(later.credential_snapshot).not.toBeNull();
  });

  it('a rolled-back terminal transaction authorizes no cleanup', async () => {
    const inst = await install();
    const session = uid('s');
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    await addTypingBadge(pool, reg);
    await expect(
      withTx(pool, { budgetMs: 3000 }, async (tx) => {
        await settleTurnInputs(tx, {
          sessionId: session,
          contextRevision: 0,
          cutoffPosition: 1,
          settledBy: 'turn:1',
          outcome: 'delivered',
        });
        throw new Error('fence lost');
      }),
    ).rejects.toThrow();
    expect(
      await settledRowIds(pool, { sessionId: session, contextRevision: 0, cutoffPosition: 1, turnNo: 1 }),
    ).toEqual([]);
    expect((await row(pool, registeredId(reg))).settled_at).toBeNull();
    expect(await typingOf(messageId, inst.appId)).toHaveLength(1);
  });

  it('another context revision is not settled by this turn', async () => {
    const inst = await install();
    const session = uid('s');
    const reg = await register(pool, inst, {
      sessionId: session,
      messageId: await newMessage(),
      position: 1,
      revision: 1,
    });
    expect(await settle(session, 5, { revision: 0 })).toEqual([]);
    expect((await row(pool, registeredId(reg))).settled_at).toBeNull();
  });
});

describe('sweeps and withdrawal', () => {
  it("a sweep removes only this app's Typing: a human's and another app's are kept", async () => {
    const inst = await install();
    const messageId = await newMessage();
    const session = uid('s');
    await emu(`messages/${messageId}/reactions`, { emoji_type: 'Typing', user_open_id: 'ou_human' });
    await emu(`messages/${messageId}/reactions`, { emoji_type: 'Typing', app_id: 'cli_someoneelse' });
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
    expect(await addTypingBadge(pool, reg)).toBe('uncertain');
    const ids = await settle(session, 1);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(reg)]: 'cleaned' });
    const left = await reactionsOn(messageId);
    expect(left.map((r) => r.operator.operator_id).sort()).toEqual(['cli_someoneelse', 'ou_human']);
  });

  it("a deleted installation's badges are withdrawn with the row's snapshot, which is then erased", async () => {
    const inst = await install();
    const messageId = await newMessage();
    const session = uid('s');
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    expect(await addTypingBadge(pool, reg)).toBe('added');
    await deleteInstallation(pool, inst.id);
    const ids = await settle(session, 1);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(reg)]: 'cleaned' });
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
    const r = await row(pool, registeredId(reg));
    expect(r.cleaned_at).not.toBeNull();
    expect(r.credential_snapshot).toBeNull();
    expect(r.quota_slot).toBeNull();
  });

  it('a recalled message answers 231003 on delete: already gone, row cleaned', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const session = uid('s');
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    await addTypingBadge(pool, reg);
    await emu(`messages/${messageId}/recall`, {});
    const ids = await settle(session, 1);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [registeredId(reg)]: 'already_gone' });
    expect((await row(pool, registeredId(reg))).credential_snapshot).toBeNull();
  });

  it('a 429 on withdrawal is retryable with the reset, scheduled for the retry pass, logged without secrets', async () => {
    const inst = await install();
    const messageId = await newMessage();
    const session = uid('s');
    const reg = await register(pool, inst, { sessionId: session, messageId, position: 1 });
    await addTypingBadge(pool, reg);
    const ids = await settle(session, 1);
    const target = (
      await pool.query(`select *, false as past_retention from channel_typing_reaction where id = $1`, [
        ids[0],
      ])
    ).rows[0];
    await emu('faults', { route: 'reactions.delete', kind: '429', resetSeconds: 42 });
    const r = await withdrawRow(pool, keys(), target, { deadline: new Deadline(2000) });
    expect(r).toMatchObject({ outcome: 'retryable', retryAfterSeconds: 42 });
    // The reset is recorded: until it passes, no delete is sent (issue 14; rate-limits.reset.test.ts).
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [ids[0]!]: 'rate_limited' });
    const { rows } = await pool.query(
      `select next_attempt_at > app_now() + interval '40 seconds' as later from channel_typing_reaction where id = $1`,
      [ids[0]],
    );
    expect(rows[0].later).toBe(true);
    await advanceDbClock(pool, 43_000);
    expect(await withdrawAfterCommit(pool, keys(), ids)).toEqual({ [ids[0]!]: 'cleaned' });
  });

  it('no credential or snapshot appears in any log line', async () => {
    const { rows } = await pool.query<{ s: string }>(
      `select credential_snapshot as s from channel_typing_reaction where credential_snapshot is not null limit 50`,
    );
    expect(logs.length).toBeGreaterThan(0);
    for (const line of logs) {
      for (const s of secrets) expect(line).not.toContain(s);
      for (const r of rows) expect(line).not.toContain(r.s);
    }
  });
});
