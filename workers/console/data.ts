import type { Context } from 'hono';
import type { MaintenanceStatus } from '../../durable-objects/typing-maintenance';
import { BACKLOG_QUERY, COUNT_CAP } from '../admin/backlog';
import type { AppEnv } from '../context';
import { withTx } from '../db/tx';
import { settingsFromRow } from '../installations/settings';
import { log } from '../log';
import { retentionOwner } from '../retention/owner';
import type { RetentionStatus } from '../retention/types';
import { typingMaintenance } from '../typing-ledger/maintenance';
import { OPERATIONAL_QUERY, type WorkspaceTypingStatus } from '../typing-ledger/operational';
import * as Q from './queries';

type Row = Record<string, unknown>;
export interface Trend {
  /** 24 hourly buckets, oldest first. */
  [kind: string]: number[];
}

export interface ConsoleData {
  dbNow: Date | null;
  typing: {
    workspaces: (WorkspaceTypingStatus & {
      quota_used: number;
      quota_skips_24h: number;
      withdraw_failed_24h: number;
    })[];
    runs: Row[];
  } | null;
  maintenance: MaintenanceStatus | null;
  effects: {
    backlog: Row;
    byState: Record<string, number>;
    staleOwners: number;
    processes: Row[];
    deadLetters: Row[];
    trends: Trend;
  } | null;
  installations: Row[] | null;
  retention: RetentionStatus | null;
  tickets: { outstanding: Row[]; maxOutstanding: number; trends: Trend } | null;
  audit: Row[] | null;
}

/** Hourly rows (`h` hours ago) as oldest-first series per kind. */
export function series(rows: { kind: string; h: number; n: number }[], kinds: string[]): Trend {
  const out: Trend = {};
  for (const k of kinds) out[k] = Array.from({ length: 24 }, () => 0);
  for (const r of rows) {
    const s = out[r.kind];
    if (s && r.h >= 0 && r.h < 24) s[23 - r.h] = (s[23 - r.h] ?? 0) + r.n;
  }
  return out;
}

/** A part that cannot be read renders as "unavailable"; the failure is logged once. */
function orNull<T>(part: string, read: Promise<T>): Promise<T | null> {
  return read.catch((err: unknown) => {
    log.error('console_read_failed', { part, error: err });
    return null;
  });
}

/** Everything the console shows, read in one bounded read-only transaction plus the two owners. */
export async function loadConsole(c: Context<AppEnv>): Promise<ConsoleData> {
  const stale = c.var.config.EFFECT_STALE_AFTER_MS;
  const [db, maintenance, retention] = await Promise.all([
    orNull(
      'database',
      withTx(c.var.db(), { budgetMs: 8000, maxAttempts: 1 }, async (tx) => {
        const q = async (sql: string, params: unknown[] = []) => (await tx.query(sql, params)).rows as Row[];
        const ops = (await q(OPERATIONAL_QUERY)) as unknown as WorkspaceTypingStatus[];
        const quota = new Map((await q(Q.TYPING_QUOTA)).map((r) => [r.workspace_id as string, r]));
        const workspaces = [...new Set([...ops.map((o) => o.workspace_id), ...quota.keys()])]
          .sort()
          .map((id) => ({
            workspace_id: id,
            pending: 0,
            overdue_redaction: 0,
            abandoned: 0,
            oldest_pending: null,
            ...ops.find((o) => o.workspace_id === id),
            quota_used: Number(quota.get(id)?.quota_used ?? 0),
            quota_skips_24h: Number(quota.get(id)?.quota_skips_24h ?? 0),
            withdraw_failed_24h: Number(quota.get(id)?.withdraw_failed_24h ?? 0),
          }));
        const backlog = (await q(BACKLOG_QUERY, [COUNT_CAP, stale]))[0]!;
        const byState = Object.fromEntries(
          (await q(Q.EFFECTS_BY_STATE, [COUNT_CAP])).map((r) => [r.status as string, Number(r.n)]),
        );
        return {
          dbNow: backlog.db_now as Date,
          typing: { workspaces, runs: await q(Q.MAINTENANCE_RUNS) },
          effects: {
            backlog,
            byState,
            staleOwners: Number((await q(Q.STALE_OWNERS, [stale]))[0]?.n ?? 0),
            processes: await q(Q.PROCESSES, [stale]),
            deadLetters: await q(Q.DEAD_LETTERS),
            trends: series((await q(Q.EFFECT_TRENDS)) as never, ['dead', 'retired']),
          },
          installations: (await q(Q.INSTALLATIONS)).map(({ settings_row, ...i }) => ({
            ...i,
            settings: settingsFromRow(settings_row as Record<string, never> | null),
          })),
          tickets: {
            outstanding: await q(Q.TICKETS_OUTSTANDING),
            maxOutstanding: c.var.config.REACTION_TICKET_MAX_OUTSTANDING,
            trends: series((await q(Q.TICKET_TRENDS)) as never, ['issued', 'expired', 'answered']),
          },
          audit: await q(Q.AUDIT),
        };
      }),
    ),
    orNull('typingMaintenance', typingMaintenance(c.env).status()),
    orNull('retentionCleanup', retentionOwner(c.env).status()),
  ]);
  return {
    dbNow: db?.dbNow ?? null,
    typing: db?.typing ?? null,
    maintenance,
    effects: db?.effects ?? null,
    installations: db?.installations ?? null,
    retention,
    tickets: db?.tickets ?? null,
    audit: db?.audit ?? null,
  };
}
