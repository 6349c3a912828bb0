import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import worker from '../../workers/index';
import type { Installation } from '../../workers/installations/store';
import { runRemoteRetry } from '../../workers/typing-ledger/passes/retry';
import { testPool, uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { emu, errorCode, admin as installationsAdmin } from '../lark/helpers';
import { liveRows, quietEmulator, trackWorkspaces } from '../typing-maintenance/helpers';
import { advanceClocks, type EmuReaction, keys, makeInstallation, reactionsOn, row } from './helpers';

/**
 * Item 5 of issue 14: operators list the rows the service gave up on (abandoned, or pending
 * past the seven-day deadline) and retry the removal of one badge now, with the installation's
 * current credentials; the result is recorded on the row.
 */
let pool: Pool;
const { track, dropAll } = trackWorkspaces();

beforeAll(async () => {
  pool = testPool(4);
  await quietEmulator();
});
afterEach(async () => {
  await emu('faults', undefined, 'DELETE');
});
afterAll(async () => {
  await dropAll(pool);
  await quietEmulator(true);
  await pool.end();
});

const BASE = 'http://test/admin/typing-reactions';
function typingAdmin(path: string, init: { method?: string; token?: string } = {}) {
  return exports.default.fetch(`${BASE}${path}`, {
    method: init.method ?? 'GET',
    headers: { authorization: `Bearer ${init.token ?? env.ADMIN_TOKEN!}` },
  });
}
const remove = (rowId: string, token?: string) =>
  typingAdmin(`/rows/${rowId}/remove`, { method: 'POST', token });
const list = (workspaceId: string, query = '') =>
  typingAdmin(`/workspaces/${encodeURIComponent(workspaceId)}/rows${query}`);

async function install(workspaceId?: string) {
  const inst = await makeInstallation(pool, workspaceId);
  track(inst.workspaceId);
  return inst;
}

type Shape = 'abandoned' | 'overdue' | 'live' | 'cleaned';

/**
 * A ledger row with a real badge of this app on its message (liveRows), then moved to the
 * state under test. `unknownId`: the Add's reaction id was never recorded (a sweep must find it).
 */
async function badge(inst: Installation, shape: Shape, opts: { unknownId?: boolean } = {}) {
  const [live] = await liveRows(pool, inst, 1);
  const { id, messageId } = live!;
  if (opts.unknownId)
    await pool.query(
      `update channel_typing_reaction set reaction_id = null, add_state = 'uncertain' where id = $1`,
      [id],
    );
  const to: Record<Shape, string> = {
    abandoned: `abandoned_at = app_now(), credential_snapshot = null, quota_slot = null,
      next_attempt_at = null, retention_outcome = 'expired',
      created_at = app_now() - interval '7 days 1 minute', expires_at = app_now() - interval '1 minute'`,
    overdue: `created_at = app_now() - interval '7 days 1 minute', expires_at = app_now() - interval '1 minute'`,
    live: 'attempts = attempts',
    cleaned: `cleaned_at = app_now(), credential_snapshot = null, quota_slot = null, next_attempt_at = null`,
  };
  await pool.query(`update channel_typing_reaction set ${to[shape]} where id = $1`, [id]);
  return { id, messageId };
}

/** A human's and another app's `Typing` on the same message: neither may ever be removed. */
async function othersOn(messageId: string) {
  const human = `ou_${uid('h').replace(/[^A-Za-z0-9]/g, '')}`;
  const otherApp = `cli_${uid('o').replace(/[^A-Za-z0-9]/g, '')}`;
  await emu(`messages/${messageId}/reactions`, { emoji_type: 'Typing', user_open_id: human });
  await emu(`messages/${messageId}/reactions`, { emoji_type: 'Typing', app_id: otherApp });
  return { human, otherApp };
}

const typingOperators = async (messageId: string) =>
  (await reactionsOn(messageId))
    .filter((r: EmuReaction) => r.reaction_type.emoji_type === 'Typing')
    .map((r) => r.operator.operator_id)
    .sort();

interface Listed {
  id: string;
  [k: string]: unknown;
}
interface Page {
  rows: Listed[];
  next: string | null;
}

describe('admin: rows the service gave up on', () => {
  it('both routes require the admin token and write nothing without it', async () => {
    const inst = await install();
    const b = await badge(inst, 'abandoned');
    const denied = [
      await typingAdmin(`/workspaces/${inst.workspaceId}/rows`, { token: 'wrong-token-wrong-token-wrong' }),
      await remove(b.id, 'wrong-token-wrong-token-wrong'),
    ];
    for (const res of denied) {
      expect(res.status).toBe(401);
      expect(await errorCode(res)).toBe('unauthorized');
    }
    expect((await row(pool, b.id)).manual_removal_at).toBeNull();
    expect(await typingOperators(b.messageId)).toEqual([inst.appId]);
  });

  it('lists abandoned and overdue rows of one workspace with ids, times, outcomes and attempts; never a snapshot or a secret', async () => {
    const inst = await install();
    const tried = await badge(inst, 'live');
    // One real retry-pass claim first: attempts, last_attempt_at and last_error are its record.
    await emu('faults', { route: 'reactions.delete', kind: '5xx', status: 503 });
    await runRemoteRetry(pool, { keys: keys(), scope: { workspaceIds: [inst.workspaceId] } });
    await pool.query(
      `update channel_typing_reaction set abandoned_at = app_now(), credential_snapshot = null,
         quota_slot = null, next_attempt_at = null, retention_outcome = 'expired' where id = $1`,
      [tried.id],
    );
    const abandoned = await badge(inst, 'abandoned');
    const overdue = await badge(inst, 'overdue');
    await badge(inst, 'live');
    await badge(inst, 'cleaned');
    const elsewhere = await install();
    await badge(elsewhere, 'abandoned');

    const res = await list(inst.workspaceId, '?state=abandoned');
    expect(res.status).toBe(200);
    const text = await res.text();
    const body = JSON.parse(text) as Page & { workspace_id: string; state: string };
    expect(body).toMatchObject({ workspace_id: inst.workspaceId, state: 'abandoned', next: null });
    expect(body.rows.map((r) => r.id).sort()).toEqual([tried.id, abandoned.id].sort());
    expect(body.rows.find((r) => r.id === tried.id)).toMatchObject({
      workspace_id: inst.workspaceId,
      installation_id: inst.id,
      app_id: inst.appId,
      source_message_id: tried.messageId,
      retention_outcome: 'expired',
      attempts: 1,
      last_error: 'retry:retryable:503',
      last_attempt_at: expect.any(String),
      created_at: expect.any(String),
      expires_at: expect.any(String),
      abandoned_at: expect.any(String),
      manual_removal_at: null,
      manual_removal_outcome: null,
      snapshot_present: false,
      installation_present: true,
    });

    const over = await list(inst.workspaceId, '?state=overdue');
    const overText = await over.text();
    const overBody = JSON.parse(overText) as Page;
    expect(overBody.rows.map((r) => r.id)).toEqual([overdue.id]);
    expect(overBody.rows[0]).toMatchObject({ abandoned_at: null, snapshot_present: true, attempts: 0 });

    // The overdue row still holds a sealed snapshot: it must not appear, nor any secret.
    const { rows } = await pool.query<{ s: string }>(
      'select credential_snapshot as s from channel_typing_reaction where id = $1',
      [overdue.id],
    );
    expect(rows[0]!.s).toBeTruthy();
    for (const t of [text, overText]) {
      expect(t).not.toContain(rows[0]!.s);
      expect(t).not.toContain(inst.appSecret);
      expect(t).not.toContain('credential_snapshot');
      expect(t).not.toMatch(/v\d+\.[A-Za-z0-9+/=]{8,}\./);
    }
  });

  it('pages are bounded and walk every row exactly once, ties on the timestamp included', async () => {
    const inst = await install();
    const made = [];
    for (let i = 0; i < 3; i++) made.push(await badge(inst, 'live'));
    // All three get the same abandoned_at (app_now() read once): only the id orders them.
    await pool.query(
      `with now as materialized (select app_now() as t)
       update channel_typing_reaction set abandoned_at = (select t from now), credential_snapshot = null,
         quota_slot = null, next_attempt_at = null where id = any($1::text[])`,
      [made.map((m) => m.id)],
    );
    const { rows: tied } = await pool.query<{ n: number }>(
      'select count(distinct abandoned_at)::int as n from channel_typing_reaction where id = any($1::text[])',
      [made.map((m) => m.id)],
    );
    expect(tied[0]!.n).toBe(1);
    const seen: string[] = [];
    let after: string | null = null;
    for (let pages = 0; pages < 10; pages++) {
      const res = await list(
        inst.workspaceId,
        `?limit=1${after ? `&after=${encodeURIComponent(after)}` : ''}`,
      );
      expect(res.status).toBe(200);
      const page = (await res.json()) as Page;
      expect(page.rows.length).toBeLessThanOrEqual(1);
      seen.push(...page.rows.map((r) => r.id));
      after = page.next;
      if (!after) break;
    }
    expect(seen).toHaveLength(3);
    expect(new Set(seen)).toEqual(new Set(made.map((m) => m.id)));
  });

  it('bad input is a 400 with a stable code, never a 5xx', async () => {
    const inst = await install();
    for (const query of [
      '?limit=101',
      '?limit=0',
      '?limit=ten',
      '?state=pending',
      '?after=garbage',
      '?after=99999999999999999999.tr_x',
      "?after=1.tr_x'--",
      '?surprise=1',
    ]) {
      const res = await list(inst.workspaceId, query);
      expect(res.status, query).toBe(400);
      expect(await errorCode(res), query).toBe('validation_failed');
    }
    const long = await list('w'.repeat(129));
    expect(long.status).toBe(400);
    // Found by the 10,000-case fuzz run: a U+0000 in the workspace id reached the statement
    // (Postgres 22021) and was answered 500.
    const nul = await list('a\u0000b');
    expect({ status: nul.status, code: await errorCode(nul) }).toEqual({
      status: 400,
      code: 'validation_failed',
    });
    for (const id of ["tr_x'or'1", 'a'.repeat(101)]) {
      const res = await remove(encodeURIComponent(id));
      expect(res.status, id).toBe(400);
      expect(await errorCode(res)).toBe('validation_failed');
    }
  });

  it('retry removes our badge by its reaction id now, keeps a human and another app; the result is recorded and the row stays abandoned', async () => {
    const inst = await install();
    const b = await badge(inst, 'abandoned');
    const { human, otherApp } = await othersOn(b.messageId);
    const before = await row(pool, b.id);

    const res = await remove(b.id);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { outcome: string; code: unknown; via: string; row: Listed };
    expect(body).toMatchObject({ outcome: 'removed', code: null, via: 'installation' });
    expect(body.row).toMatchObject({ id: b.id, manual_removal_outcome: 'removed', cleaned_at: null });

    expect(await typingOperators(b.messageId)).toEqual([human, otherApp].sort());
    const after = await row(pool, b.id);
    expect(after.abandoned_at).toEqual(before.abandoned_at);
    expect(after.cleaned_at).toBeNull();
    expect(after).toMatchObject({ manual_removal_outcome: 'removed', manual_removal_code: null });
    expect(after.manual_removal_at).not.toBeNull();
  });

  it("without a reaction id, the removal sweeps and deletes only this app's own Typing", async () => {
    const inst = await install();
    const b = await badge(inst, 'abandoned', { unknownId: true });
    const { human, otherApp } = await othersOn(b.messageId);

    const res = await remove(b.id);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ outcome: 'removed' });
    expect(await typingOperators(b.messageId)).toEqual([human, otherApp].sort());

    // Asked again: nothing of ours is left, and that is what is recorded.
    expect(await (await remove(b.id)).json()).toMatchObject({ outcome: 'none_found' });
    expect(await row(pool, b.id)).toMatchObject({ manual_removal_outcome: 'none_found', cleaned_at: null });
  });

  it('an overdue pending row whose badge is removed is cleaned like any other: snapshot erased, slot released', async () => {
    const inst = await install();
    const b = await badge(inst, 'overdue');
    const res = await remove(b.id);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ outcome: 'removed', via: 'installation' });
    const after = await row(pool, b.id);
    expect(after.cleaned_at).not.toBeNull();
    expect(after).toMatchObject({
      abandoned_at: null,
      credential_snapshot: null,
      quota_slot: null,
      manual_removal_outcome: 'removed',
    });
    expect(await typingOperators(b.messageId)).toEqual([]);
  });

  it('installation gone: an overdue row falls back to its snapshot; an abandoned row answers 409 typing_no_credentials and nothing is written', async () => {
    const inst = await install();
    const overdue = await badge(inst, 'overdue');
    const abandoned = await badge(inst, 'abandoned');
    expect((await installationsAdmin(`/${inst.id}`, { method: 'DELETE' })).status).toBe(200);

    const listed = (await (await list(inst.workspaceId)).json()) as Page;
    expect(listed.rows.find((r) => r.id === abandoned.id)).toMatchObject({ installation_present: false });

    const viaSnapshot = await remove(overdue.id);
    expect(viaSnapshot.status).toBe(200);
    expect(await viaSnapshot.json()).toMatchObject({ outcome: 'removed', via: 'snapshot' });
    expect(await typingOperators(overdue.messageId)).toEqual([]);

    const none = await remove(abandoned.id);
    expect(none.status).toBe(409);
    expect(await errorCode(none)).toBe('typing_no_credentials');
    expect((await row(pool, abandoned.id)).manual_removal_at).toBeNull();
    expect(await typingOperators(abandoned.messageId)).toEqual([inst.appId]);
  });

  it('an unknown row is 404; a pending row inside its lifetime and a cleaned row are 409; nothing is written', async () => {
    const inst = await install();
    const unknown = await remove('tr_00000000000000000000000000000000');
    expect(unknown.status).toBe(404);
    expect(await errorCode(unknown)).toBe('not_found');

    const live = await badge(inst, 'live');
    const active = await remove(live.id);
    expect(active.status).toBe(409);
    expect(await errorCode(active)).toBe('typing_row_active');

    const cleaned = await badge(inst, 'cleaned');
    const done = await remove(cleaned.id);
    expect(done.status).toBe(409);
    expect(await errorCode(done)).toBe('typing_row_cleaned');

    for (const b of [live, cleaned]) {
      expect((await row(pool, b.id)).manual_removal_at).toBeNull();
      expect(await typingOperators(b.messageId)).toEqual([inst.appId]);
    }
  });

  it('a failed removal is answered with its outcome and code, recorded, and can be retried', async () => {
    const inst = await install();
    const b = await badge(inst, 'abandoned');
    await emu('faults', { route: 'reactions.delete', kind: '429', resetSeconds: 9 });

    const res = await remove(b.id);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ outcome: 'retryable', code: 99991400, retry_after_seconds: 9 });
    expect(await row(pool, b.id)).toMatchObject({
      manual_removal_outcome: 'retryable',
      manual_removal_code: 99991400,
      cleaned_at: null,
    });
    expect(await typingOperators(b.messageId)).toEqual([inst.appId]);

    // Before Lark's reset the route is held (lark_rate_limits): nothing is sent.
    const deleteCalls = async () =>
      (await emu<{ calls: unknown[] }>('calls?route=reactions.delete')).calls.length;
    const deletesBefore = await deleteCalls();
    expect(await (await remove(b.id)).json()).toMatchObject({ outcome: 'retryable', code: 99991400 });
    expect(await deleteCalls()).toBe(deletesBefore);

    await advanceClocks(pool, 9_000);
    expect(await (await remove(b.id)).json()).toMatchObject({ outcome: 'removed', code: null });
    expect(await row(pool, b.id)).toMatchObject({
      manual_removal_outcome: 'removed',
      manual_removal_code: null,
    });
  });

  it('each manual action is logged once with a stable event, without credentials', async () => {
    const inst = await install();
    const b = await badge(inst, 'abandoned');
    const logs = captureLogLines();
    const call = async (rowId: string) => {
      const ctx = createExecutionContext();
      const res = await worker.fetch(
        new Request(`${BASE}/rows/${rowId}/remove`, {
          method: 'POST',
          headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` },
        }),
        { ...env, LOG_LEVEL: 'info' },
        ctx,
      );
      await waitOnExecutionContext(ctx);
      return res;
    };
    try {
      expect((await call(b.id)).status).toBe(200);
      expect((await call('tr_00000000000000000000000000000000')).status).toBe(404);
    } finally {
      logs.restore();
    }
    expect(logs.events('typing_manual_removal')).toEqual([
      expect.objectContaining({ level: 'info', rowId: b.id, outcome: 'removed', via: 'installation' }),
      expect.objectContaining({ rowId: 'tr_00000000000000000000000000000000', outcome: 'unknown_row' }),
    ]);
    const all = JSON.stringify(logs.lines);
    expect(all).not.toContain(inst.appSecret);
  });
});
