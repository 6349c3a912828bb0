// DATABASE_URL=… npx tsx bench/probes/receipt-index-plans.ts [rows]
//
// Issue 18 item 3: which of the receipts' indexes each query that reads
// private.chat_reaction_operations uses. Seeds `rows` receipts (half ticket, half legacy, spread
// over 60 days), VACUUM ANALYZE, then EXPLAINs every such statement of workers/ (retention probe
// and batch, legacy-contract count, console trends and outstanding tickets, the receipt lookup)
// and the foreign-key actions' queries, once as migrated (the baseline, 0020,
// has neither chat_reaction_operations_created_idx nor _ticket_expiry_idx) and once with both
// restored (rolled back): the evidence for leaving them out (the squashed migration 0117).
import type { Pool } from '@neondatabase/serverless';
import { TICKET_TRENDS, TICKETS_OUTSTANDING } from '../../workers/console/queries';
import { BATCH_SQL } from '../../workers/retention/batch';
import { START_KEY } from '../../workers/retention/eligibility';
import { PROBE_SQL } from '../../workers/retention/probe';
import { startBenchStack } from '../lib/stack';

const ROWS = Number(process.argv[2] ?? 200_000);
const stack = await startBenchStack();
const pool = stack.pg(2) as unknown as Pool;
try {
  await pool.query(`insert into private.workspaces (id) values ('w');
    insert into private.actors (id, workspace_id) select 'a' || g, 'w' from generate_series(0, 99) g;
    insert into private.conversations (id, workspace_id) values ('c', 'w');
    insert into private.messages (id, workspace_id, conversation_id) select 'm' || g, 'w', 'c' from generate_series(0, 999) g;`);
  await pool.query(
    `insert into private.chat_reaction_operations
       (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, outcome,
        reaction_version, contract, ticket_expires_at, created_at)
     select 'a' || (g % 100), 'op_' || lpad(g::text, 10, '0'), 'w', 'c', 'm' || (g % 1000), '👍', 'present', 'added', 1,
            case when g % 2 = 0 then 'ticket' else 'legacy' end,
            case when g % 2 = 0 then app_now() - (g % 60) * interval '1 day' + interval '7 days' end,
            app_now() - (g % 60) * interval '1 day'
       from generate_series(1, $1) g`,
    [ROWS],
  );
  await pool.query('vacuum analyze private.chat_reaction_operations');
  const day = 86_400_000;
  const statements: [string, string, unknown[]][] = [
    ['retention probe', PROBE_SQL, [30 * day, 3_600_000, 90 * day]],
    ['retention receipt batch', BATCH_SQL.receipts, [30 * day, 3_600_000, START_KEY.createdAt, '', '', 250]],
    [
      'legacy contract count (contract.ts)',
      `select (select count(*) from private.chat_reaction_operations o
                where o.contract = 'legacy' and o.created_at > app_now() - interval '1 day')`,
      [],
    ],
    ['console ticket trends', TICKET_TRENDS, []],
    ['console outstanding', TICKETS_OUTSTANDING, []],
    [
      'receipt lookup',
      'select * from private.chat_reaction_operations where actor_id = $1 and operation_id = $2',
      ['a1', 'op_0000000001'],
    ],
    ['FK action: message', 'select 1 from private.chat_reaction_operations where message_id = $1', ['m1']],
    [
      'FK action: conversation',
      'select 1 from private.chat_reaction_operations where conversation_id = $1',
      ['c'],
    ],
    ['FK action: workspace', 'select 1 from private.chat_reaction_operations where workspace_id = $1', ['w']],
    ['FK action: actor', 'select 1 from private.chat_reaction_operations where actor_id = $1', ['a1']],
    [
      'FK action: ticket',
      'select 1 from private.chat_reaction_operations where ticket_id = $1',
      ['00000000-0000-0000-0000-000000000000'],
    ],
  ];
  const indexesOf = (plan: unknown): string[] => {
    const out: string[] = [];
    const walk = (n: Record<string, unknown>) => {
      if (n['Relation Name'] === 'chat_reaction_operations')
        out.push(`${n['Node Type']}${n['Index Name'] ? ` ${n['Index Name']}` : ''}`);
      for (const c of (n.Plans as Record<string, unknown>[] | undefined) ?? []) walk(c);
    };
    walk((plan as { Plan: Record<string, unknown> }[])[0]!.Plan);
    return out;
  };
  const client = await (stack.pg(1) as unknown as Pool).connect();
  for (const variant of ['as migrated', 'created_idx + ticket_expiry_idx restored (as before the squash)']) {
    await client.query('begin');
    if (variant !== 'as migrated')
      await client.query(
        `create index chat_reaction_operations_created_idx on private.chat_reaction_operations (created_at);
         create index chat_reaction_operations_ticket_expiry_idx on private.chat_reaction_operations (ticket_expires_at);
         analyze private.chat_reaction_operations`,
      );
    console.log(`\n## ${variant} (${ROWS} receipts)`);
    for (const [name, sql, params] of statements) {
      await client.query('savepoint s');
      const { rows } = await client.query<{ 'QUERY PLAN': unknown }>(
        `explain (analyze, format json) ${sql}`,
        params,
      );
      await client.query('rollback to savepoint s');
      const plan = rows[0]!['QUERY PLAN'] as { 'Execution Time': number }[];
      console.log(`${name}: ${indexesOf(plan).join(', ')} (${plan[0]!['Execution Time'].toFixed(2)} ms)`);
    }
    await client.query('rollback');
  }
  client.release();
} finally {
  await stack.stop();
}
process.exit(0);
