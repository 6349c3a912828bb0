import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PRUNE_TICKETS } from '../../../workers/housekeeping/tickets';
import { BATCH_SQL } from '../../../workers/retention/batch';
import { START_KEY } from '../../../workers/retention/eligibility';
import { PROBE_SQL } from '../../../workers/retention/probe';
import { scratchDatabase } from '../scratch-database';

/**
 * The retention cleanup's and the ticket housekeeping's statements stay bounded by their
 * indexes as the tables grow (docs/retention.md "Statement plans"). Before issue 15 the age
 * cutoff compared app_now() (volatile) per row, so it could never be an index bound: with
 * nothing eligible a probe or batch walked the whole index (`Rows Removed by Filter` = every
 * row); and each deleted ticket set its receipt's ticket_id to null through the foreign key
 * with a sequential scan of the receipts (no index on ticket_id).
 *
 * A few thousand rows, statistics from VACUUM ANALYZE, default planner settings (reset at
 * the start of each transaction, so nothing the server or a session set changes the plan).
 */
const db = scratchDatabase('rl_tmp');
const ROWS = 5000;
const DAY_MS = 86_400_000;
let pool: pg.Pool;

const RECEIPTS = 'chat_reaction_operations';
const FENCES = 'chat_retired_reaction_operations';
const TICKETS = 'reaction_tickets';
const TABLES = [RECEIPTS, FENCES, TICKETS];

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Index Cond'?: string;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  'Rows Removed by Filter'?: number;
  'Actual Rows'?: number;
  Plans?: PlanNode[];
}

function nodes(n: PlanNode): PlanNode[] {
  return [n, ...(n.Plans ?? []).flatMap(nodes)];
}

interface Analyzed {
  plan: PlanNode;
  /** Sequential scans of the three tables in the transaction, foreign-key triggers included. */
  seqScans: Record<string, number>;
}

/** EXPLAIN ANALYZE inside a rolled-back transaction: the plan as executed, no change kept. */
async function analyze(sql: string, params: unknown[]): Promise<Analyzed> {
  const c = await pool.connect();
  try {
    await c.query('begin');
    await c.query('reset all');
    // This backend's counts not yet flushed to the shared statistics (earlier transactions'
    // too), read before and after: the difference is this statement's, triggers included.
    const counts = async () => {
      const { rows } = await c.query<{ relname: string; seq_scan: string }>(
        `select relname, seq_scan from pg_stat_xact_user_tables
          where schemaname = 'private' and relname = any($1::text[])`,
        [TABLES],
      );
      return new Map(rows.map((s) => [s.relname, Number(s.seq_scan)]));
    };
    const before = await counts();
    const r = await c.query(`explain (analyze, buffers, format json) ${sql}`, params);
    const plan = (r.rows[0]['QUERY PLAN'] as { Plan: PlanNode }[])[0]!.Plan;
    const after = await counts();
    return { plan, seqScans: Object.fromEntries(TABLES.map((t) => [t, after.get(t)! - before.get(t)!])) };
  } finally {
    await c.query('rollback');
    c.release();
  }
}

/** The scans of `table` whose index condition bounds it by the age cutoff (`column < …`). */
function cutoffBounded(plan: PlanNode, table: string, column: string): PlanNode[] {
  return nodes(plan).filter(
    (n) => n['Relation Name'] === table && new RegExp(`\\b${column} < `).test(n['Index Cond'] ?? ''),
  );
}

const seqScanNodes = (plan: PlanNode) =>
  nodes(plan)
    .filter((n) => n['Node Type'] === 'Seq Scan' && TABLES.includes(n['Relation Name'] ?? ''))
    .map((n) => n['Relation Name']);

const retention = (receiptDays: number, fenceDays: number) => ({
  receipts: receiptDays * DAY_MS,
  fences: fenceDays * DAY_MS,
});
const GRACE_MS = 3_600_000;
const batchParams = (ms: number) => [
  ms,
  GRACE_MS,
  START_KEY.createdAt,
  START_KEY.actorId,
  START_KEY.operationId,
  250,
];

/** Every statement of the hourly cleanup and of the ticket housekeeping, for given windows. */
function statements(
  windows: { receipts: number; fences: number },
  ticketGraceMs: number,
): [string, string, unknown[], [string, string][]][] {
  return [
    ['batch (receipts)', BATCH_SQL.receipts, batchParams(windows.receipts), [[RECEIPTS, 'created_at']]],
    ['batch (fences)', BATCH_SQL.fences, batchParams(windows.fences), [[FENCES, 'created_at']]],
    [
      'probe',
      PROBE_SQL,
      [windows.receipts, GRACE_MS, windows.fences],
      [
        [RECEIPTS, 'created_at'],
        [FENCES, 'created_at'],
      ],
    ],
    ['ticket housekeeping', PRUNE_TICKETS, [ticketGraceMs, 1000], [[TICKETS, 'expires_at']]],
  ];
}

beforeAll(async () => {
  pool = await db.open();
  // 5,000 tickets, each with its receipt and its fence, created 400 days ago one ms apart,
  // tickets expired after 7 days; the legacy contract drained a day ago.
  await pool.query(`
    insert into private.workspaces (id) values ('w');
    insert into private.actors (id, workspace_id) values ('a', 'w');
    insert into private.conversations (id, workspace_id) values ('c', 'w');
    insert into private.messages (id, workspace_id, conversation_id) values ('m', 'w', 'c');
    update private.write_contract_state
       set closed_at = app_now() - interval '1 day', drained_at = app_now() - interval '1 day'`);
  await pool.query(
    `with g as (
       select g, gen_random_uuid() as ticket, 'op-' || lpad(g::text, 8, '0') as op,
              app_now() - interval '400 days' + g * interval '1 ms' as created
         from generate_series(1, $1::int) g),
     t as (
       insert into private.reaction_tickets
         (id, actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired,
          key_version, created_at, expires_at)
       select ticket, 'a', op, 'w', 'c', 'm', 'x', 'present', '1', created, created + interval '7 days' from g),
     r as (
       insert into private.chat_reaction_operations
         (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, outcome,
          reaction_version, contract, ticket_id, ticket_expires_at, created_at)
       select 'a', op, 'w', 'c', 'm', 'x', 'present', 'added', 1, 'ticket', ticket,
              created + interval '7 days', created from g)
     insert into private.chat_retired_reaction_operations
       (actor_id, operation_id, workspace_id, message_id, contract, ticket_id, ticket_expires_at, created_at)
     select 'a', op, 'w', 'm', 'ticket', ticket, created + interval '7 days', created from g`,
    [ROWS],
  );
  for (const t of TABLES) await pool.query(`vacuum analyze private.${t}`);
}, 120_000);

afterAll(async () => {
  await db.drop();
});

describe(`retention cleanup and ticket housekeeping statement plans (${ROWS} rows per table)`, () => {
  it('with nothing eligible, each statement is bounded by its age cutoff and reads a few index pages', async () => {
    // Windows longer than the rows' age: nothing is old enough.
    const seen = [];
    for (const [label, sql, params, bounds] of statements(retention(1000, 1000), 1000 * DAY_MS)) {
      const { plan, seqScans } = await analyze(sql, params);
      seen.push({
        label,
        seqScanNodes: seqScanNodes(plan),
        seqScans,
        removed: Math.max(
          0,
          ...nodes(plan)
            .filter((n) => TABLES.includes(n['Relation Name'] ?? ''))
            .map((n) => n['Rows Removed by Filter'] ?? 0),
        ),
        unbounded: bounds.filter(([t, col]) => cutoffBounded(plan, t, col).length === 0),
        fewPages: (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0) < 50,
      });
    }
    expect(seen).toEqual(
      seen.map(({ label }) => ({
        label,
        seqScanNodes: [],
        seqScans: { [RECEIPTS]: 0, [FENCES]: 0, [TICKETS]: 0 },
        removed: 0,
        unbounded: [],
        fewPages: true,
      })),
    );
  });

  it('with everything eligible, a batch reads its rows by the cutoff-bounded index and deletes them by key, never by a table scan', async () => {
    const writes: Record<string, [string, number] | null> = {
      'batch (receipts)': [`${RECEIPTS}_pkey`, 250],
      'batch (fences)': [`${FENCES}_pkey`, 250],
      probe: null,
      // By ctid (tickets are never updated); each deleted ticket sets its receipt's ticket_id
      // to null through the foreign key, by index (seqScans on the receipts: 0).
      'ticket housekeeping': ['Tid Scan', 1000],
    };
    const seen = [];
    for (const [label, sql, params, bounds] of statements(retention(30, 90), 30 * DAY_MS)) {
      const { plan, seqScans } = await analyze(sql, params);
      const want = writes[label];
      seen.push({
        label,
        seqScanNodes: seqScanNodes(plan),
        seqScans,
        unbounded: bounds.filter(([t, col]) => cutoffBounded(plan, t, col).length === 0),
        byKey: want
          ? nodes(plan).some((n) =>
              want[0] === 'Tid Scan'
                ? n['Node Type'] === 'Tid Scan' && n['Relation Name'] === TICKETS
                : (n['Node Type'] === 'Index Scan' || n['Node Type'] === 'Bitmap Index Scan') &&
                  n['Index Name'] === want[0],
            )
          : null,
        picked: want ? nodes(plan).find((n) => n['Node Type'] === 'Limit')?.['Actual Rows'] : null,
      });
    }
    expect(seen).toEqual(
      seen.map(({ label }) => ({
        label,
        seqScanNodes: [],
        seqScans: { [RECEIPTS]: 0, [FENCES]: 0, [TICKETS]: 0 },
        unbounded: [],
        byKey: writes[label] ? true : null,
        picked: writes[label]?.[1] ?? null,
      })),
    );
  });
});
