import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLAIM } from '../../../workers/typing-ledger/passes/claim';
import { EXPIRE_LIFETIME, EXPIRE_TASKLESS } from '../../../workers/typing-ledger/passes/expire';
import {
  BACKOFF_BASE_MS,
  BACKOFF_MAX_MS,
  TASKLESS_EXPIRY_MS,
  TOMBSTONE_RETENTION_MS,
} from '../../../workers/typing-ledger/passes/limits';
import { PRUNE_CUTOFFS, PRUNE_TOMBSTONES } from '../../../workers/typing-ledger/passes/prune';
import { scratchDatabase } from '../scratch-database';

/**
 * The maintenance statements stay bounded by their indexes as the ledger grows
 * (docs/typing-maintenance.md "Statement plans"). Before the fix, app_now() (volatile) was
 * compared per row, so an expiry or pruning pass with fewer due rows than its cap walked the
 * whole partial index (5 s at 1M rows, past its 2 s budget), and the write joined its batch
 * by a hash join over a sequential scan of the ledger at small sizes.
 */
const db = scratchDatabase('rl_tmp');
let pool: pg.Pool;

const STATEMENTS: [string, string, unknown[]][] = [
  ['expire (lifetime)', EXPIRE_LIFETIME, [1000, null]],
  ['expire (taskless)', EXPIRE_TASKLESS, [1000, null, TASKLESS_EXPIRY_MS]],
  ['prune (tombstones)', PRUNE_TOMBSTONES, [1000, TOMBSTONE_RETENTION_MS, null]],
  ['prune (cutoffs)', PRUNE_CUTOFFS, [1000, TOMBSTONE_RETENTION_MS]],
  ['claim', CLAIM, [100, null, BACKOFF_BASE_MS, BACKOFF_MAX_MS]],
];

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  'Rows Removed by Filter'?: number;
  'Index Name'?: string;
  'Actual Rows'?: number;
  Plans?: PlanNode[];
}

function nodes(n: PlanNode): PlanNode[] {
  return [n, ...(n.Plans ?? []).flatMap(nodes)];
}

/** EXPLAIN ANALYZE inside a rolled-back transaction: the plan as executed, no change kept. */
async function analyze(sql: string, params: unknown[]): Promise<PlanNode> {
  const c = await pool.connect();
  try {
    await c.query('begin');
    const r = await c.query(`explain (analyze, buffers, format json) ${sql}`, params);
    return (r.rows[0]['QUERY PLAN'] as { Plan: PlanNode }[])[0]!.Plan;
  } finally {
    await c.query('rollback');
    c.release();
  }
}

const ledgerSeqScans = (plan: PlanNode) =>
  nodes(plan).filter(
    (n) => n['Node Type'] === 'Seq Scan' && n['Relation Name'] === 'channel_typing_reaction',
  );

beforeAll(async () => {
  pool = await db.open();
  // A healthy 40k-row ledger: pending and young (a tenth backing off for an hour, a tenth
  // taskless and just registered), half of it recent success tombstones.
  await pool.query(`insert into channel_typing_reaction
      (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
       context_revision, taskless, add_state, expires_at, created_at, cleaned_at, next_attempt_at)
    select 'p' || g, 'ws_' || (g % 50), 'i', 'cli', 's' || g, 'm' || g, g, 0, g % 10 = 3, 'added',
           app_now() + interval '7 days' - (g % 3600) * interval '1 second',
           app_now() - case when g % 10 = 3 then interval '0' else (g % 3600) * interval '1 second' end,
           case when g % 2 = 0 then app_now() - (g % 3600) * interval '1 second' end,
           case when g % 10 = 1 then app_now() + interval '1 hour' end
    from generate_series(1, 40000) g`);
  await pool.query('vacuum analyze channel_typing_reaction');
}, 120_000);

afterAll(async () => {
  await db.drop();
});

describe('typing maintenance statement plans (40k-row ledger)', () => {
  it('a pass with nothing due reads a few index pages, not every pending row or tombstone', async () => {
    for (const [label, sql, params] of STATEMENTS) {
      const plan = await analyze(sql, params);
      const all = nodes(plan);
      const blocks = (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);
      const removed = Math.max(0, ...all.map((n) => n['Rows Removed by Filter'] ?? 0));
      expect({ label, seqScans: ledgerSeqScans(plan).length, removed }).toEqual({
        label,
        seqScans: 0,
        removed: 0,
      });
      expect(blocks, label).toBeLessThan(50);
    }
  });

  it('a full batch is found by its index range and written by primary key, never a ledger scan', async () => {
    await pool.query(`insert into channel_typing_reaction
        (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
         context_revision, taskless, expires_at, created_at, abandoned_at, next_attempt_at)
      select 'b' || k || g, 'ws_b', 'i', 'cli', 's', 'bm' || k || g, g, 0, k = 'x',
             case when k = 'e' then app_now() - interval '1 minute' else app_now() + interval '1 day' end,
             app_now() - interval '8 days',
             case when k = 't' then app_now() - interval '8 days' end,
             case when k = 'r' then app_now() - interval '1 second' end
      from (values ('e', 1000), ('x', 1000), ('t', 1000), ('r', 100)) v(k, n), generate_series(1, v.n) g`);
    await pool.query('analyze channel_typing_reaction');
    const expected: Record<string, number> = {
      'expire (lifetime)': 1000,
      'expire (taskless)': 1000,
      'prune (tombstones)': 1000,
      claim: 100,
    };
    for (const [label, sql, params] of STATEMENTS) {
      if (!(label in expected)) continue;
      const plan = await analyze(sql, params);
      expect({ label, seqScans: ledgerSeqScans(plan).length }).toEqual({ label, seqScans: 0 });
      const write = nodes(plan).find(
        (n) =>
          (n['Node Type'] === 'Index Scan' || n['Node Type'] === 'Bitmap Index Scan') &&
          n['Index Name'] === 'channel_typing_reaction_pkey',
      );
      expect(write, `${label} writes by primary key`).toBeDefined();
      expect(nodes(plan).find((n) => n['Node Type'] === 'Limit')?.['Actual Rows'], label).toBe(
        expected[label],
      );
    }
  });
});
