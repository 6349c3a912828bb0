import type { Pool } from '@neondatabase/serverless';
import { startLarkEmulator } from '../../emulator/server';
import { claimDue } from '../../workers/typing-ledger/passes/claim';
import { runExpiration } from '../../workers/typing-ledger/passes/expire';
import { runPruning } from '../../workers/typing-ledger/passes/prune';
import { runRemoteRetry } from '../../workers/typing-ledger/passes/retry';
import { newRowId, sealSnapshot } from '../../workers/typing-ledger/snapshot';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, round } from '../lib/stats';

/**
 * Typing maintenance (docs/typing-maintenance.md). (1) One full remote-retry pass of 100 rows
 * with the emulator at 200 ms per call (target: well under the 10 s budget). (2) Expiration,
 * pruning and claim statement times with 10k and with 1M ledger rows (target: 1M within 1.5x
 * of 10k, by index). Each statement is measured on a batch that exists (1,000 due for expiry,
 * 1,000 old tombstones, 100 due retries) among the bulk of the table, which is pending, young,
 * not due: the shape of a healthy production ledger. BENCH_TYPING_MAINT_BIG overrides 1M.
 */
const KEYS = { '1': Buffer.from('0123456789abcdef0123456789abcdef').toString('base64') };

async function fill(pool: Pool, n: number, tag: string) {
  // The healthy bulk: pending, registered within the hour, settled turns waiting on nothing.
  for (let start = 1; start <= n; start += 200_000) {
    const end = Math.min(n, start + 199_999);
    await pool.query(
      `insert into channel_typing_reaction
         (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
          context_revision, taskless, add_state, expires_at, created_at, cleaned_at)
       select $1 || g, 'ws_' || (g % 500), 'i', 'cli', 's' || g, $1 || 'm' || g, g, 0, false, 'added',
              app_now() + interval '7 days' - (g % 3600) * interval '1 second',
              app_now() - (g % 3600) * interval '1 second',
              case when g % 2 = 0 then app_now() - (g % 3600) * interval '1 second' end
       from generate_series($2::int, $3::int) g`,
      [`${tag}_`, start, end],
    );
  }
  await pool.query('analyze channel_typing_reaction');
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

async function statements(pool: Pool, size: number, tag: string): Promise<Record<string, number>> {
  await pool.query('delete from channel_typing_reaction');
  await fill(pool, size, tag);
  const out: Record<string, number> = {};
  for (let round = 0; round < 3; round++) {
    await batch(pool, `${tag}${round}`);
    const [e] = await timed(() => runExpiration(pool, { budgetMs: 30_000 }));
    const [p] = await timed(() => runPruning(pool, { budgetMs: 30_000 }));
    const [c] = await timed(() => claimDue(pool));
    out.expire = Math.min(out.expire ?? Infinity, e);
    out.prune = Math.min(out.prune ?? Infinity, p);
    out.claim = Math.min(out.claim ?? Infinity, c);
  }
  return out;
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
      suite: '46-typing-maintenance',
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
  const big = Number(process.env.BENCH_TYPING_MAINT_BIG ?? 1_000_000);
  const small = await statements(pool, 10_000, 's');
  const large = await statements(pool, big, 'l');
  for (const k of ['expire', 'prune', 'claim'] as const)
    out.push({
      suite: '46-typing-maintenance',
      case: `${k} statement (1,000/1,000/100 rows)`,
      'ms @10k': round(small[k]!),
      [`ms @${big}`]: round(large[k]!),
      ratio: round(large[k]! / small[k]!),
      target: '<= 1.5',
    });
  await pool.query('delete from channel_typing_reaction');
  return out;
}
