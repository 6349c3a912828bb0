import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import type { MaintenanceStatus } from '../../durable-objects/typing-maintenance';
import type { Installation } from '../../workers/installations/store';
import { newRowId, sealSnapshot } from '../../workers/typing-ledger/snapshot';
import { uid } from '../helpers/db';
import { emu } from '../lark/helpers';
import { keys } from '../typing-ledger/helpers';

export { captureLogs, keys, makeInstallation, newMessage, row, typingOf } from '../typing-ledger/helpers';

export interface BulkRows {
  workspaceId: string;
  n: number;
  /** Registration time relative to app_now(), in ms (negative = in the past). */
  createdOffsetMs?: number;
  taskless?: boolean;
  settled?: boolean;
  addState?: 'pending' | 'uncertain' | 'added' | 'not_added';
  /** next_attempt_at relative to app_now() (null: not due). */
  dueOffsetMs?: number | null;
  /** 'cleaned' | 'abandoned' terminal at app_now() + terminalOffsetMs. */
  terminal?: 'cleaned' | 'abandoned';
  terminalOffsetMs?: number;
  /** Give each row a quota slot 1..n (n ≤ 1000). */
  slots?: boolean;
}

/**
 * Many ledger rows in one statement (generate_series) for the database-only passes. Live rows
 * carry a placeholder "snapshot" so tests can see it erased; no remote call ever uses it.
 */
export async function bulkRows(pool: Pool, o: BulkRows): Promise<void> {
  const terminal = o.terminal ?? null;
  await pool.query(
    `insert into channel_typing_reaction
       (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
        context_revision, credential_snapshot, quota_slot, add_state, taskless, settled_at,
        cleaned_at, abandoned_at, next_attempt_at, expires_at, created_at, updated_at)
     select $1 || '_' || g, $2, 'inst_bulk', 'cli_bulk', $1 || '_s', $1 || '_m' || g, g, 0,
            case when $8::text is null then 'v1.placeholder-sealed' end,
            case when $11 then g end, $5, $4,
            case when $3 then app_now() + $6 * interval '1 millisecond' end,
            case when $8 = 'cleaned' then app_now() + $9 * interval '1 millisecond' end,
            case when $8 = 'abandoned' then app_now() + $9 * interval '1 millisecond' end,
            case when $7::float8 is null then null else app_now() + $7::float8 * interval '1 millisecond' end,
            app_now() + $6 * interval '1 millisecond' + interval '7 days',
            app_now() + $6 * interval '1 millisecond', app_now()
     from generate_series(1, $10::int) g`,
    [
      uid('r'),
      o.workspaceId,
      o.settled ?? false,
      o.taskless ?? false,
      o.addState ?? 'added',
      o.createdOffsetMs ?? 0,
      o.dueOffsetMs === undefined ? null : o.dueOffsetMs,
      terminal,
      o.terminalOffsetMs ?? 0,
      o.n,
      o.slots ?? false,
    ],
  );
}

/**
 * Live rows with real badges: a message in the emulator, our app's `Typing` on it, and a
 * settled ledger row with a sealed snapshot and the reaction id, due for the retry pass now.
 */
export async function liveRows(
  pool: Pool,
  inst: Installation,
  n: number,
): Promise<{ id: string; messageId: string }[]> {
  const out: { id: string; messageId: string; reactionId: string; sealed: string }[] = [];
  await Promise.all(
    Array.from({ length: n }, async () => {
      const { message_id: messageId } = await emu<{ message_id: string }>('messages', { text: 'hi' });
      const r = await emu<{ reaction_id: string }>(`messages/${messageId}/reactions`, {
        emoji_type: 'Typing',
        app_id: inst.appId,
      });
      const id = newRowId();
      const sealed = await sealSnapshot(keys(), id, {
        appId: inst.appId,
        appSecret: inst.appSecret,
        apiBase: inst.apiBase,
      });
      out.push({ id, messageId, reactionId: r.reaction_id, sealed });
    }),
  );
  await pool.query(
    `insert into channel_typing_reaction
       (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
        context_revision, credential_snapshot, reaction_id, add_state, taskless, settled_at,
        next_attempt_at, expires_at)
     select x.id, $5, $6, $7, 'sess_' || x.id, x.mid, 1, 0, x.sealed, x.rid, 'added', false, app_now(),
            app_now(), app_now() + interval '7 days'
     from unnest($1::text[], $2::text[], $3::text[], $4::text[]) as x(id, mid, rid, sealed)`,
    [
      out.map((o) => o.id),
      out.map((o) => o.messageId),
      out.map((o) => o.reactionId),
      out.map((o) => o.sealed),
      inst.workspaceId,
      inst.id,
      inst.appId,
    ],
  );
  return out.map(({ id, messageId }) => ({ id, messageId }));
}

/** Rate limits off for the file (restored afterwards); faults and call log cleared. */
export async function quietEmulator(on = false) {
  await emu('rate-limits', { enabled: on });
  await emu('faults', undefined, 'DELETE');
  await emu('calls', undefined, 'DELETE');
}

export async function callCounts(): Promise<Record<string, number>> {
  return (await emu<{ counts: Record<string, number> }>('calls')).counts;
}

export async function counts(pool: Pool, workspaceId: string) {
  const { rows } = await pool.query<{ live: number; cleaned: number; abandoned: number; total: number }>(
    `select count(*) filter (where cleaned_at is null and abandoned_at is null)::int as live,
            count(*) filter (where cleaned_at is not null)::int as cleaned,
            count(*) filter (where abandoned_at is not null)::int as abandoned,
            count(*)::int as total
     from channel_typing_reaction where workspace_id = $1`,
    [workspaceId],
  );
  return rows[0]!;
}

export async function dropWorkspace(pool: Pool, workspaceId: string) {
  await pool.query('delete from channel_typing_reaction where workspace_id = $1', [workspaceId]);
}

/** Fresh workspace ids for one test file, all dropped by `dropAll` in its afterAll. */
export function trackWorkspaces() {
  const ids: string[] = [];
  const track = (w: string) => {
    ids.push(w);
    return w;
  };
  return {
    /** A new workspace id, remembered for the cleanup. */
    ws: () => track(uid('ws')),
    /** Remembers a workspace made elsewhere (e.g. by makeInstallation). */
    track,
    dropAll: async (pool: Pool) => {
      for (const w of ids) await dropWorkspace(pool, w);
    },
  };
}

/** The TypingMaintenance singleton, as the minute cron and the admin routes reach it. */
export const maintenanceStub = () =>
  env.TYPING_MAINTENANCE.get(env.TYPING_MAINTENANCE.idFromName('singleton'));

/**
 * Forgets the last run (so the next alarm is outside the same-window dedup, which counts on
 * the isolate's clock, not the database test clock) and arms the alarm a minute out, so only
 * runDurableObjectAlarm runs it, not the runtime by itself.
 */
export const nextMaintenanceWindow = () =>
  runInDurableObject(maintenanceStub(), async (_, state) => {
    await state.storage.delete('lastRunAt');
    await state.storage.setAlarm(Date.now() + 60_000);
  });

/** One 30-second pass exactly as production runs it: the object's alarm. Returns its report. */
export async function runMaintenanceAlarm(): Promise<NonNullable<MaintenanceStatus['lastReport']>> {
  await nextMaintenanceWindow();
  if (!(await runDurableObjectAlarm(maintenanceStub()))) throw new Error('the maintenance alarm did not run');
  const report = (await maintenanceStub().status()).lastReport;
  if (!report) throw new Error('the maintenance alarm stored no report');
  return report;
}
