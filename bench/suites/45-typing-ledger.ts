import type { Pool } from '@neondatabase/serverless';
import { startLarkEmulator } from '../../emulator/server';
import { insertInstallation, openInstallation } from '../../workers/installations/store';
import {
  addTypingBadge,
  type Registration,
  registerInput,
  settleTurnInputs,
  withdrawAfterCommit,
} from '../../workers/typing-ledger';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';

/**
 * The typing ledger measured through its own functions (the engine's bench/suites/50-channel.ts
 * measures the full webhook). "answer" = what the ledger adds to the webhook's answer path,
 * simulated as the webhook's transaction: begin, receipt insert, registerInput, commit.
 * The Add runs after the answer; "badges gone" = from the terminal commit to the last of a
 * turn's three coalesced badges deleted (withdrawAfterCommit), with the emulator at 0/200 ms.
 */
const KEYS = { '1': Buffer.from('0123456789abcdef0123456789abcdef').toString('base64') };

export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const rounds = Number(process.env.BENCH_TYPING_ROUNDS ?? 3);
  const lark = await startLarkEmulator({ rateLimits: false });
  const pool = stack.neon(70) as unknown as Pool;
  const rows: BenchRow[] = [];
  try {
    const appId = 'cli_benchtyping';
    await fetch(`${lark.url}/__emulator/apps`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ app_id: appId, app_secret: 'bench-secret', verification_token: 'vt' }),
    });
    const inst = await openInstallation(
      KEYS,
      await insertInstallation(pool, KEYS, {
        workspaceId: 'ws_bench',
        appId,
        apiBase: lark.url,
        appSecret: 'bench-secret',
        verificationToken: 'vt',
      }),
    );
    const newMessage = async () =>
      (
        (await (await fetch(`${lark.url}/__emulator/messages`, { method: 'POST', body: '{}' })).json()) as {
          message_id: string;
        }
      ).message_id;
    let seq = 0;
    for (const latencyMs of [0, 200]) {
      lark.faults.clear();
      if (latencyMs) lark.faults.add({ route: '*', kind: 'latency', latencyMs, times: 1e9 });
      for (const concurrency of [1, 16, 64]) {
        const answer: number[] = [];
        const add: number[] = [];
        let trips = 0;
        for (let r = 0; r < rounds; r++) {
          const messages = await Promise.all(Array.from({ length: concurrency }, () => newMessage()));
          await Promise.all(
            messages.map(async (messageId) => {
              const session = `s_bench_${seq++}`;
              const t0 = performance.now();
              const client = await pool.connect();
              let reg: Registration;
              let n = 0;
              try {
                await client.query('begin');
                await client.query('select 1'); // stands in for the receipt insert
                const counted = {
                  query: (...a: Parameters<typeof client.query>) => {
                    n++;
                    return client.query(...a);
                  },
                };
                reg = await registerInput(counted as typeof client, KEYS, {
                  installation: inst,
                  sessionId: session,
                  messageId,
                  inputPosition: 1,
                  contextRevision: 0,
                  receivedAtMs: Date.now(),
                });
                await client.query('commit');
              } finally {
                client.release();
              }
              answer.push(performance.now() - t0);
              trips += n;
              const t1 = performance.now();
              await addTypingBadge(pool, reg);
              add.push(performance.now() - t1);
              await settle(pool, session);
            }),
          );
        }
        rows.push({
          suite: 'typing-ledger',
          case: `answer path, ${concurrency} concurrent, emulator ${latencyMs} ms`,
          n: answer.length,
          'p50 ms': round(percentile(answer, 50)),
          'p99 ms': round(percentile(answer, 99)),
          'ledger round trips/event': round(trips / answer.length, 2),
          'Add p50 ms (after answer)': round(percentile(add, 50)),
        });
      }
      // Reply delivered → every badge of a 3-input turn gone.
      const gone: number[] = [];
      for (let r = 0; r < 10; r++) {
        const session = `s_turn_${seq++}`;
        for (let p = 1; p <= 3; p++) {
          const messageId = await newMessage();
          const reg = await withTx(pool, (tx) =>
            registerInput(tx, KEYS, {
              installation: inst,
              sessionId: session,
              messageId,
              inputPosition: p,
              contextRevision: 0,
              receivedAtMs: Date.now(),
            }),
          );
          await addTypingBadge(pool, reg);
        }
        const t0 = performance.now();
        const ids = await settle(pool, session);
        await withdrawAfterCommit(pool, KEYS, ids);
        gone.push(performance.now() - t0);
      }
      rows.push({
        suite: 'typing-ledger',
        case: `terminal commit → 3 badges gone, emulator ${latencyMs} ms`,
        n: gone.length,
        'p50 ms': round(percentile(gone, 50)),
        'p99 ms': round(percentile(gone, 99)),
      });
    }
  } finally {
    await lark.close();
  }
  return rows;
}

async function withTx<T>(pool: Pool, fn: (tx: import('@neondatabase/serverless').PoolClient) => Promise<T>) {
  const c = await pool.connect();
  try {
    await c.query('begin');
    const out = await fn(c);
    await c.query('commit');
    return out;
  } catch (e) {
    await c.query('rollback').catch(() => undefined);
    throw e;
  } finally {
    c.release();
  }
}

function settle(pool: Pool, sessionId: string) {
  return withTx(pool, (tx) =>
    settleTurnInputs(tx, {
      sessionId,
      contextRevision: 0,
      cutoffPosition: 3,
      settledBy: 'bench',
      outcome: 'delivered',
    }),
  );
}
