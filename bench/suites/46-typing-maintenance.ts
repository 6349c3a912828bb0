import { loadavg } from 'node:os';
import type { Pool } from '@neondatabase/serverless';
import pg from 'pg';
import { startLarkEmulator } from '../../emulator/server';
import { claimDue } from '../../workers/typing-ledger/passes/claim';
import { runExpiration } from '../../workers/typing-ledger/passes/expire';
import { runPruning } from '../../workers/typing-ledger/passes/prune';
import { runRemoteRetry } from '../../workers/typing-ledger/passes/retry';
import { newRowId, sealSnapshot } from '../../workers/typing-ledger/snapshot';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';

/**
 * Typing maintenance (docs/typing-maintenance.md). (1) One full remote-retry pass of 100 rows
 * with the emulator at 200 ms per call (target: well under the 10 s budget). (2) Expiration,
 * pruning and claim statement times with 10k and with 1M ledger rows (target: 1M within 1.5x
 * of 10k, by index). The bulk of the table is the shape of a healthy production ledger:
 * pending and young, half of it success tombstones, a tenth waiting on a retry backoff.
 *
 * Measured fairly at both sizes: the table is loaded, then VACUUM ANALYZE (visibility map,
 * hint bits, statistics, as autovacuum leaves a long-lived table); one warm-up round is
 * discarded; then SAMPLES rounds, the two sizes alternating within each round (the shared
 * machine's load drifts), each inserting the same fresh batch (1,000 rows past the lifetime,
 * 1,000 tombstones past seven days, 100 due retries) and timing each pass on a direct
 * connection; the figure is the p50, and the affected-row counts are checked equal at both
 * sizes. Two cases per statement: a full batch (the cap reached) and nothing due (the
 * steady state, where a scan that is not bounded by its index walks the whole partial index).
 * BENCH_TYPING_MAINT_BIG overrides 1M, BENCH_TYPING_MAINT_SAMPLES the 9 samples.
 */
const KEYS = { '1': Buffer.from('0123456789abcdef0123456789abcdef').toString('base64') };
const SAMPLES = Number(process.env.BENCH_TYPING_MAINT_SAMPLES ?? 9);
const SUITE = '46-typing-maintenance';
const SMALL = 'bench_typing_small';
type Kind = 'expire' | 'prune' | 'claim';
const KINDS: Kind[] = ['expire', 'prune', 'claim'];

async function fill(pool: Pool, n: number, tag: string) {
  // The healthy bulk: pending, registered within the hour, half of it success tombstones
  // (cleaned within the hour), a tenth of the pending rows backing off until later.
  for (let start = 1; start <= n; start += 200_000) {
    const end = Math.min(n, start + 199_999);
    await pool.query(
      `insert into channel_typing_reaction
         (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
          context_revision, taskless, add_state, expires_at, created_at, cleaned_at, next_attempt_at)
       select $1 || g, 'ws_' || (g % 500), 'i', 'cli', 's' || g, $1 || 'm' || g, g, 0, false, 'added',
              app_now() + interval '7 days' - (g % 3600) * interval '1 second',
              app_now() - (g % 3600) * interval '1 second',
              case when g % 2 = 0 then app_now() - (g % 3600) * interval '1 second' end,
              case when g % 10 = 1 then app_now() + interval '1 hour' + (g % 3600) * interval '1 second' end
       from generate_series($2::int, $3::int) g`,
      [`${tag}_`, start, end],
    );
  }
  await pool.query('vacuum analyze channel_typing_reaction');
}

async function batch(pool: Pool, tag: string) {
  // 1,000 past the lifetime, 1,000 tombstones past seven days, 100 due retries.
  await pool.query(
    `insert into channel_typing_reaction
       (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
        context_revision, taskless, expires_at, created_at, abandoned_at, next_attempt_at)
     select $1 || k || g, 'ws_b', 'i', 'cli', 's', $1 || k || 'm' || g, g, 0, false,
            case when k = 'e' then app_now() - interval '1 minute' else app_now() + interval '1 day' end,
            app_now() - interval '8 days',
            case when k = 't' then app_now() - interval '8 days' end,
            case when k = 'r' then app_now() - interval '1 second' end
     from (values ('e', 1000), ('t', 1000), ('r', 100)) v(k, n), generate_series(1, v.n) g`,
    [`${tag}_b_`],
  );
}

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const r = await fn();
  return [performance.now() - t0, r];
}

/** One round of the three passes as the maintenance DO runs them: expire, prune, claim. */
async function passes(pool: Pool): Promise<Record<Kind, [number, number]>> {
  const [e, er] = await timed(() => runExpiration(pool, { budgetMs: 30_000 }));
  const [p, pr] = await timed(() => runPruning(pool, { budgetMs: 30_000 }));
  const [c, cr] = await timed(() => claimDue(pool));
  return {
    expire: [e, er.expired + er.tasklessExpired],
    prune: [p, pr.pruned + pr.cutoffsPruned],
    claim: [c, cr.length],
  };
}

type Figure = Record<Kind, { ms: number; rows: number }>;

/**
 * Warm-up round (discarded: caches, catalog, plans) then SAMPLES rounds. Each round runs the
 * small ledger and then the large one, so the load of the shared machine, which drifts over
 * a minute, weighs on both sizes alike instead of on whichever was measured second.
 */
async function sampled(ledgers: Pool[], before: (pool: Pool, i: number) => Promise<void>): Promise<Figure[]> {
  const ms = ledgers.map(() => ({ expire: [], prune: [], claim: [] }) as Record<Kind, number[]>);
  const rows = ledgers.map(
    () => ({ expire: new Set(), prune: new Set(), claim: new Set() }) as Record<Kind, Set<number>>,
  );
  for (let i = -1; i < SAMPLES; i++)
    for (const [j, pool] of ledgers.entries()) {
      await before(pool, i);
      const r = await passes(pool);
      if (i < 0) continue;
      for (const k of KINDS) {
        ms[j]![k].push(r[k][0]);
        rows[j]![k].add(r[k][1]);
      }
    }
  return ledgers.map((_, j) => {
    const out = {} as Figure;
    for (const k of KINDS) {
      const seen = [...rows[j]![k]];
      if (seen.length !== 1) throw new Error(`${k}: affected rows varied between samples: ${seen}`);
      out[k] = { ms: percentile(ms[j]![k], 50), rows: seen[0]! };
    }
    return out;
  });
}

/** Both ledgers loaded up front, then measured round by round: a full batch, then nothing due. */
async function statements(
  small: Pool,
  large: Pool,
  big: number,
): Promise<{ full: Figure[]; idle: Figure[] }> {
  await fill(small, 10_000, 's');
  await fill(large, big, 'l');
  const both = [small, large];
  const full = await sampled(both, (pool, i) => batch(pool, `b${i + 1}`));
  // Nothing due: the batches are consumed; the claimed rows are parked a day out so a slow
  // round cannot bring their 30 s backoff due again (not timed).
  for (const pool of both)
    await pool.query(
      `update channel_typing_reaction set next_attempt_at = app_now() + interval '1 day'
       where workspace_id = 'ws_b' and next_attempt_at is not null`,
    );
  const idle = await sampled(both, async () => undefined);
  return { full, idle };
}

async function retryPass(stack: BenchStack, pool: Pool): Promise<BenchRow> {
  const lark = await startLarkEmulator({ rateLimits: false });
  try {
    const appId = 'cli_benchmaint';
    await fetch(`${lark.url}/__emulator/apps`, {
      method: 'POST',
      body: JSON.stringify({ app_id: appId, app_secret: 'bench-secret', verification_token: 'vt' }),
    });
    const rows: unknown[][] = [[], [], [], []];
    for (let i = 0; i < 100; i++) {
      const m = (await (
        await fetch(`${lark.url}/__emulator/messages`, { method: 'POST', body: '{}' })
      ).json()) as {
        message_id: string;
      };
      const r = (await (
        await fetch(`${lark.url}/__emulator/messages/${m.message_id}/reactions`, {
          method: 'POST',
          body: JSON.stringify({ emoji_type: 'Typing', app_id: appId }),
        })
      ).json()) as { reaction_id: string };
      const id = newRowId();
      rows[0]!.push(id);
      rows[1]!.push(m.message_id);
      rows[2]!.push(r.reaction_id);
      rows[3]!.push(await sealSnapshot(KEYS, id, { appId, appSecret: 'bench-secret', apiBase: lark.url }));
    }
    await pool.query(
      `insert into channel_typing_reaction
         (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
          context_revision, credential_snapshot, reaction_id, add_state, taskless, settled_at, next_attempt_at, expires_at)
       select x.id, 'ws_retry', 'i', $5, 's', x.m, 1, 0, x.s, x.r, 'added', false, app_now(), app_now(), app_now() + interval '7 days'
       from unnest($1::text[], $2::text[], $3::text[], $4::text[]) x(id, m, r, s)`,
      [...rows, appId],
    );
    lark.faults.add({ route: '*', kind: 'latency', latencyMs: 200, times: 1e9 });
    const [ms, report] = await timed(() =>
      runRemoteRetry(pool, { keys: KEYS, scope: { workspaceIds: ['ws_retry'] } }),
    );
    void stack;
    return {
      suite: SUITE,
      case: 'retry pass, 100 rows, emulator 200 ms/call',
      ms: round(ms),
      claimed: report.claimed,
      cleaned: report.cleaned,
      deferred: report.deferred,
      target: '< 10000 ms',
    };
  } finally {
    await lark.close();
  }
}

export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const pool = stack.neon(30) as unknown as Pool;
  const out: BenchRow[] = [await retryPass(stack, pool)];
  await pool.query('delete from channel_typing_reaction');
  // The 10k ledger lives in a schema of its own (same columns, constraints and indexes), so
  // both sizes exist at once and can be measured round by round. Statement times go over a
  // direct connection: the bridge's round trips are a constant that would flatten the ratio.
  await pool.query(`create schema ${SMALL}`);
  for (const t of ['channel_typing_reaction', 'channel_typing_settlement'])
    await pool.query(`create table ${SMALL}.${t} (like public.${t} including all)`);
  const small = new pg.Pool({
    connectionString: stack.databaseUrl,
    max: 2,
    options: `-c search_path=${SMALL},public`,
  });
  const large = stack.pg(2) as unknown as Pool;
  const big = Number(process.env.BENCH_TYPING_MAINT_BIG ?? 1_000_000);
  try {
    const figures = await statements(small as unknown as Pool, large, big);
    const load = loadavg()[0]!;
    for (const c of ['full', 'idle'] as const)
      for (const k of KINDS) {
        const [a, b] = [figures[c][0]![k], figures[c][1]![k]];
        if (a.rows !== b.rows) throw new Error(`${k} ${c}: ${a.rows} rows at 10k, ${b.rows} at ${big}`);
        out.push({
          suite: SUITE,
          case: `${k} pass, ${c === 'full' ? 'full batch' : 'nothing due'} (p50 of ${SAMPLES})`,
          rows: a.rows,
          'ms @10k': round(a.ms),
          [`ms @${big}`]: round(b.ms),
          ratio: round(b.ms / a.ms),
          target: '<= 1.5',
          load1: round(load),
        });
      }
  } finally {
    await small.end();
    await pool.query(`drop schema ${SMALL} cascade`);
    await large.query('delete from channel_typing_reaction');
  }
  return out;
}
