import { loadavg } from 'node:os';
import type { Pool } from '@neondatabase/serverless';
import pg from 'pg';
import { migrate } from '../../scripts/lib/migrator';
import { adminQuery, withDatabase } from '../../scripts/lib/postgres';
import { withTx } from '../../workers/db/tx';
import { pruneExpiredTickets } from '../../workers/housekeeping/tickets';
import { BATCH_ROWS, deleteBatch } from '../../workers/retention/batch';
import type { RetentionCursor, RetentionLimits, RetentionTable } from '../../workers/retention/eligibility';
import { probe } from '../../workers/retention/probe';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';

/**
 * Issue 15: every statement of the hourly retention cleanup (probe, receipt batch, fence
 * batch) and of the ticket housekeeping, at 10k and at 1M rows per table, in two states:
 * nothing eligible (the steady state: before the fix the age cutoff was a per-row filter, so
 * these walked the whole index) and everything eligible (a budgeted batch: 250 receipts or
 * fences, 1,000 tickets, each deleted ticket setting its receipt's ticket_id to null through
 * the foreign key, by an index on ticket_id). Target: each 1M figure within 1.5x of its 10k one.
 *
 * Each size is its own freshly migrated database (the statements name their tables, so a
 * schema of its own cannot stand in): N tickets, each with its receipt and fence, created
 * 400 days ago, then VACUUM ANALYZE. "Nothing eligible" passes windows longer than the rows'
 * age; "everything eligible" the default ones. Each statement runs as production runs it: its
 * own budgeted transaction, no retry, over a direct connection (the bridge's round trips are
 * a constant that would flatten the ratio). One warm-up round is discarded; then SAMPLES
 * rounds, the two sizes alternating within each round (the shared machine's load drifts);
 * the figure is the p50, and the affected-row counts are checked equal at both sizes.
 * BENCH_RETENTION_SCANS_BIG overrides 1M, BENCH_RETENTION_SCANS_SAMPLES the 7 samples (at
 * 10k, 1 + 7 rounds of 1,000 tickets leave 2,000).
 */
const SUITE = '61-retention-scans';
const SAMPLES = Number(process.env.BENCH_RETENTION_SCANS_SAMPLES ?? 7);
const DAY_MS = 86_400_000;
/** The defaults (workers/env.ts): 30 / 90 days, 1 h drain grace; tickets 30 days after expiry. */
const DUE: RetentionLimits = {
  receiptRetentionMs: 30 * DAY_MS,
  fenceRetentionMs: 90 * DAY_MS,
  drainGraceMs: 3_600_000,
};
const DUE_TICKET_GRACE_MS = 30 * DAY_MS;
/** Longer than the rows' age (400 days): nothing is eligible. */
const IDLE: RetentionLimits = { ...DUE, receiptRetentionMs: 1000 * DAY_MS, fenceRetentionMs: 1000 * DAY_MS };
const IDLE_TICKET_GRACE_MS = 1000 * DAY_MS;
const RETENTION_BATCH_BUDGET_MS = 5000; // RETENTION_BATCH_TIMEOUT_MS
const HOUSEKEEPING = { budgetMs: 3000, batchRows: 1000 }; // HOUSEKEEPING_STEP_BUDGET_MS, _BATCH_ROWS

type Kind = 'probe' | 'receipts' | 'fences' | 'tickets';
const KINDS: Kind[] = ['probe', 'receipts', 'fences', 'tickets'];
const LABEL: Record<Kind, string> = {
  probe: 'cleanup probe',
  receipts: 'cleanup batch, receipts',
  fences: 'cleanup batch, fences',
  tickets: 'ticket housekeeping batch',
};

export async function seed(pool: pg.Pool, n: number): Promise<void> {
  await pool.query(`
    insert into private.workspaces (id) values ('w');
    insert into private.actors (id, workspace_id) values ('a', 'w');
    insert into private.conversations (id, workspace_id) values ('c', 'w');
    insert into private.messages (id, workspace_id, conversation_id) values ('m', 'w', 'c');
    update private.write_contract_state
       set closed_at = app_now() - interval '1 day', drained_at = app_now() - interval '1 day'`);
  for (let start = 1; start <= n; start += 200_000) {
    await pool.query(
      `with g as (
         select g, gen_random_uuid() as ticket, 'op-' || lpad(g::text, 8, '0') as op,
                app_now() - interval '400 days' + g * interval '1 ms' as created
           from generate_series($1::int, $2::int) g),
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
      [start, Math.min(n, start + 199_999)],
    );
  }
  for (const t of ['reaction_tickets', 'chat_reaction_operations', 'chat_retired_reaction_operations'])
    await pool.query(`vacuum analyze private.${t}`);
}

/** One database of `n` rows per table; the cursors carry over between rounds, as a run's do. */
class Sized {
  readonly cursors: Record<RetentionTable, RetentionCursor | null> = { receipts: null, fences: null };
  constructor(
    readonly n: number,
    readonly pool: pg.Pool,
  ) {}
  private get neon() {
    return this.pool as unknown as Pool;
  }

  /** One statement in its own transaction, as production runs it; returns [ms, rows]. */
  async time(kind: Kind, due: boolean): Promise<[number, number]> {
    const t0 = performance.now();
    let rows: number;
    if (kind === 'probe') {
      const look = await withTx(this.neon, { budgetMs: RETENTION_BATCH_BUDGET_MS, maxAttempts: 1 }, (c) =>
        probe(c, due ? DUE : IDLE),
      );
      rows = look.oldestEligibleAgeMs === null ? 0 : 1;
    } else if (kind === 'tickets') {
      rows = await withTx(this.neon, { budgetMs: HOUSEKEEPING.budgetMs, maxAttempts: 1 }, (c) =>
        pruneExpiredTickets(c, due ? DUE_TICKET_GRACE_MS : IDLE_TICKET_GRACE_MS, HOUSEKEEPING.batchRows),
      );
    } else {
      const done = await withTx(this.neon, { budgetMs: RETENTION_BATCH_BUDGET_MS, maxAttempts: 1 }, (c) =>
        deleteBatch(c, kind, due ? DUE : IDLE, due ? this.cursors[kind] : null),
      );
      if (due) this.cursors[kind] = done.last;
      rows = done.deleted;
    }
    return [performance.now() - t0, rows];
  }
}

type Figure = Record<Kind, { ms: number; rows: number }>;

/** Warm-up round (discarded) then SAMPLES rounds, the sizes alternating within each round. */
async function sampled(sizes: Sized[], due: boolean): Promise<Figure[]> {
  const ms = sizes.map(
    () => ({ probe: [], receipts: [], fences: [], tickets: [] }) as Record<Kind, number[]>,
  );
  const rows = sizes.map(
    () =>
      ({ probe: new Set(), receipts: new Set(), fences: new Set(), tickets: new Set() }) as Record<
        Kind,
        Set<number>
      >,
  );
  for (let i = -1; i < SAMPLES; i++)
    for (const [j, size] of sizes.entries())
      for (const k of KINDS) {
        const [t, r] = await size.time(k, due);
        if (i < 0) continue;
        ms[j]![k].push(t);
        rows[j]![k].add(r);
      }
  return sizes.map((_, j) => {
    const out = {} as Figure;
    for (const k of KINDS) {
      const seen = [...rows[j]![k]];
      if (seen.length !== 1) throw new Error(`${k}: affected rows varied between samples: ${seen}`);
      out[k] = { ms: percentile(ms[j]![k], 50), rows: seen[0]! };
    }
    return out;
  });
}

export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const big = Number(process.env.BENCH_RETENTION_SCANS_BIG ?? 1_000_000);
  const adminUrl = withDatabase(stack.databaseUrl, 'postgres');
  const tag = Date.now().toString(36);
  const names = [`rl_bench_scans_small_${tag}`, `rl_bench_scans_big_${tag}`];
  const pools: pg.Pool[] = [];
  try {
    const sizes: Sized[] = [];
    for (const [i, n] of [10_000, big].entries()) {
      await adminQuery(adminUrl, `create database ${names[i]}`);
      const url = withDatabase(adminUrl, names[i]!);
      await migrate(url, { dir: new URL('../../migrations', import.meta.url).pathname });
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      pools.push(pool);
      await seed(pool, n);
      sizes.push(new Sized(n, pool));
    }
    const idle = await sampled(sizes, false);
    const due = await sampled(sizes, true);
    const load = loadavg()[0]!;
    const out: BenchRow[] = [];
    for (const [state, figures] of [
      ['nothing eligible', idle],
      ['everything eligible', due],
    ] as const)
      for (const k of KINDS) {
        const [a, b] = [figures[0]![k], figures[1]![k]];
        if (a.rows !== b.rows) throw new Error(`${k} ${state}: ${a.rows} rows at 10k, ${b.rows} at ${big}`);
        out.push({
          suite: SUITE,
          case: `${LABEL[k]}, ${state} (p50 of ${SAMPLES})`,
          rows: k === 'probe' ? (a.rows ? 'found' : 'none') : a.rows,
          'ms @10k': round(a.ms),
          [`ms @${big}`]: round(b.ms),
          ratio: round(b.ms / a.ms),
          target: '<= 1.5',
          load1: round(load),
        });
      }
    if (due[0]!.receipts.rows !== BATCH_ROWS) throw new Error(`a due batch deleted ${due[0]!.receipts.rows}`);
    return out;
  } finally {
    await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
    for (const name of names)
      await adminQuery(adminUrl, `drop database if exists ${name} with (force)`).catch(() => undefined);
  }
}
