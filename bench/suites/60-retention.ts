import type { Pool as NeonPool } from '@neondatabase/serverless';
import { Deadline } from '../../workers/clock';
import { withTx } from '../../workers/db/tx';
import { deleteBatch } from '../../workers/retention/batch';
import type { RetentionCursor, RetentionLimits, RetentionTable } from '../../workers/retention/eligibility';
import { MAX_BATCHES, runTicketRetention } from '../../workers/retention/run';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';

/**
 * Retention cleanup at scale: one batch (250 rows, the production statement through the Neon
 * driver and bridge, in its own budgeted transaction) with 10k and with 1M receipts and
 * fences in the tables, and one full run (probe + 10 x 250) at 1M. The batch is an index
 * range scan on (created_at, actor_id, operation_id) from the cursor, so its time should
 * not grow with the table: the acceptance bound is 1.5x from 10k to 1M.
 */
const LIMITS: RetentionLimits = {
  receiptRetentionMs: 30 * 86_400_000,
  fenceRetentionMs: 90 * 86_400_000,
  drainGraceMs: 3_600_000,
};
const SAMPLES = Number(process.env.BENCH_RETENTION_SAMPLES ?? 30);

type Direct = { query(sql: string, params?: unknown[]): Promise<unknown> };

async function seed(db: Direct, from: number, to: number): Promise<void> {
  // Old enough for both tables, tickets long expired; created_at strictly increasing.
  await db.query(
    `insert into private.chat_reaction_operations
       (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, outcome,
        reaction_version, contract, ticket_expires_at, created_at)
     select 'bench_actor', 'op-' || lpad(g::text, 8, '0'), 'bench_ws', 'bench_conv', 'bench_msg', 'x',
       'present', 'added', 1, 'ticket', now() - interval '200 days',
       now() - interval '400 days' + g * interval '1 ms'
     from generate_series($1::int, $2::int) g`,
    [from, to],
  );
  await db.query(
    `insert into private.chat_retired_reaction_operations
       (actor_id, operation_id, workspace_id, message_id, contract, ticket_expires_at, created_at)
     select 'bench_actor', 'op-' || lpad(g::text, 8, '0'), 'bench_ws', 'bench_msg', 'ticket',
       now() - interval '200 days', now() - interval '400 days' + g * interval '1 ms'
     from generate_series($1::int, $2::int) g`,
    [from, to],
  );
  await db.query('analyze private.chat_reaction_operations');
  await db.query('analyze private.chat_retired_reaction_operations');
}

/** Times `SAMPLES` consecutive batches per table, carrying the cursor as a run does. */
async function timeBatches(neon: NeonPool, table: RetentionTable): Promise<number[]> {
  const samples: number[] = [];
  let cursor: RetentionCursor | null = null;
  for (let i = 0; i < SAMPLES; i++) {
    const t = performance.now();
    const done = await withTx(neon, { budgetMs: 5000, maxAttempts: 1 }, (c) =>
      deleteBatch(c, table, LIMITS, cursor),
    );
    samples.push(performance.now() - t);
    if (done.deleted !== 250) throw new Error(`batch deleted ${done.deleted}`);
    cursor = done.last;
  }
  return samples;
}

function row(label: string, n: string, samples: number[]): BenchRow {
  return {
    suite: 'retention',
    case: label,
    n,
    'p50 ms': round(percentile(samples, 50), 2),
    'p99 ms': round(percentile(samples, 99), 2),
  };
}

export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const direct = stack.pg(2);
  const neon = stack.neon(2);
  await direct.query(
    `insert into private.workspaces (id) values ('bench_ws');
     insert into private.actors (id, workspace_id) values ('bench_actor', 'bench_ws');
     insert into private.conversations (id, workspace_id) values ('bench_conv', 'bench_ws');
     insert into private.messages (id, workspace_id, conversation_id) values ('bench_msg', 'bench_ws', 'bench_conv');
     update private.write_contract_state set closed_at = now() - interval '1 day', drained_at = now() - interval '1 day';
     update private.retention_control set enabled = true`,
  );
  await neon.query('select 1');
  const rows: BenchRow[] = [];

  await seed(direct, 1, 10_000);
  const small = [...(await timeBatches(neon, 'receipts')), ...(await timeBatches(neon, 'fences'))];
  rows.push(row('one batch (250 rows), 10k per table', '10k', small));

  const total = Number(process.env.BENCH_RETENTION_ROWS ?? 1_000_000);
  await seed(direct, 10_001, total);
  const large = [...(await timeBatches(neon, 'receipts')), ...(await timeBatches(neon, 'fences'))];
  rows.push(row(`one batch (250 rows), ${total / 1e6}M per table`, `${total / 1e6}M`, large));
  rows.push({
    suite: 'retention',
    case: 'batch p50 ratio 1M / 10k (bound 1.5)',
    ratio: round(percentile(large, 50) / percentile(small, 50), 2),
  });

  const runs: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    const report = await runTicketRetention({
      pool: neon,
      limits: LIMITS,
      cursor: null,
      deadline: new Deadline(25_000),
      batchTimeoutMs: 5000,
      hooks: { admit: () => 'ok', track: () => undefined, saveCursor: () => undefined },
    });
    runs.push(performance.now() - t);
    if (report.batches !== MAX_BATCHES || report.rowsDeleted !== 2500)
      throw new Error(`full run: ${JSON.stringify(report)}`);
  }
  rows.push(row(`full run (probe + 10 x 250), ${total / 1e6}M per table`, `${total / 1e6}M`, runs));
  return rows;
}
