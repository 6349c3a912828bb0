import type { Pool, PoolClient } from '@neondatabase/serverless';
import { withTx } from '../db/tx';
import { pruneCallCounts } from '../lark/call-counts';
import { log } from '../log';
import { pruneRecalledMessages, pruneSettledInputs, pruneTerminalTurns } from './channel-history';
import { pruneConsoleHistory } from './console-history';
import { pruneIdleConversations } from './conversations';
import type { HousekeepingSettings } from './settings';
import { pruneExpiredTickets } from './tickets';

export type StepName =
  | 'tickets'
  | 'turns'
  | 'inputs'
  | 'recalls'
  | 'conversations'
  | 'console'
  | 'lark_calls';

/** Rows deleted per step; null when the step failed (logged, the others still ran). */
export type HousekeepingReport = Record<StepName, number | null>;

type Step = (tx: PoolClient, s: HousekeepingSettings) => Promise<number>;

// Turns before inputs before conversations: each later rule waits for the earlier ones, so
// one run can carry a conversation's history all the way down when it is due.
const STEPS: [StepName, Step][] = [
  ['tickets', (tx, s) => pruneExpiredTickets(tx, s.ticketGraceMs, s.batchRows)],
  ['turns', (tx, s) => pruneTerminalTurns(tx, s.channelHistoryMs, s.batchRows)],
  ['inputs', (tx, s) => pruneSettledInputs(tx, s.channelHistoryMs, s.batchRows)],
  // After inputs: a recall outlives every input of its message (migration 0210).
  ['recalls', (tx, s) => pruneRecalledMessages(tx, s.channelHistoryMs, s.batchRows)],
  ['conversations', (tx, s) => pruneIdleConversations(tx, s.conversationIdleMs, s.batchRows)],
  // The console's history and audit (migration 0090): independent of the others.
  ['console', (tx, s) => pruneConsoleHistory(tx, s.batchRows)],
  // The apps' daily Lark call counts (migrations/0030_baseline_lark.sql), 7 days after their day: independent too.
  ['lark_calls', (tx, s) => pruneCallCounts(tx, s.batchRows)],
];

/**
 * One bounded batch per table: each step is its own transaction with its own budget
 * (statement_timeout = lock_timeout = stepBudgetMs), no retry (the next minute is the
 * retry), and at most `batchRows` rows. Every statement picks rows `for update skip locked`,
 * so two overlapping runs split the work instead of waiting on each other. A failing step is
 * logged and reported as null; it never stops the steps after it.
 */
export async function runHousekeeping(
  pool: Pool,
  settings: HousekeepingSettings,
  only?: StepName[],
): Promise<HousekeepingReport> {
  const report: HousekeepingReport = {
    tickets: 0,
    turns: 0,
    inputs: 0,
    recalls: 0,
    conversations: 0,
    console: 0,
    lark_calls: 0,
  };
  for (const [name, step] of STEPS) {
    if (only && !only.includes(name)) continue;
    try {
      report[name] = await withTx(pool, { budgetMs: settings.stepBudgetMs, maxAttempts: 1 }, (tx) =>
        step(tx, settings),
      );
    } catch (err) {
      report[name] = null;
      log.error('housekeeping_step_failed', { step: name, error: err });
    }
  }
  return report;
}
