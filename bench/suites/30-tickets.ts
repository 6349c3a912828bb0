import type { Pool } from '@neondatabase/serverless';
import { withTx } from '../../workers/db/tx';
import { mintOperationId } from '../../workers/reaction-tickets/operation-id';
import { applyWithTicket } from '../../workers/reaction-tickets/operations';
import { issueTicket } from '../../workers/reaction-tickets/tickets';
import type { Desired, Queryable } from '../../workers/reaction-tickets/types';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';

/**
 * Ticketed reaction writes vs the bare upsert, 32 concurrent actors, on one hot message and on
 * 32 different messages. Calls the domain functions directly from Node through the Neon
 * driver and the WebSocket bridge (stack.neon()), not over HTTP: the figures are the
 * database cost of the contract (operation + retirement locks, message row lock, fresh-time
 * expiry checks, receipt), without JWT, Worker or DO overhead. Tickets are issued before
 * the timed phase. Each actor alternates present/absent, so every write really changes a row.
 */
const ACTORS = 32;
const OPS = Number(process.env.BENCH_TICKET_OPS ?? 60);
const TX = { budgetMs: 10_000, lockTimeoutMs: 10_000 };

async function seed(pool: Pool, tag: string): Promise<{ actors: string[]; hot: string; spread: string[] }> {
  const ws = `bench_${tag}`;
  const actors = Array.from({ length: ACTORS }, (_, i) => `${ws}_a${i}`);
  const spread = actors.map((_, i) => `${ws}_m${i}`);
  const hot = `${ws}_hot`;
  await pool.query(`insert into private.workspaces (id) values ($1)`, [ws]);
  await pool.query('insert into private.actors (id, workspace_id) select unnest($1::text[]), $2', [
    actors,
    ws,
  ]);
  await pool.query('insert into private.conversations (id, workspace_id) values ($1, $2)', [`${ws}_c`, ws]);
  await pool.query(
    'insert into private.conversation_members (conversation_id, actor_id) select $1, unnest($2::text[])',
    [`${ws}_c`, actors],
  );
  await pool.query(
    'insert into private.messages (id, workspace_id, conversation_id) select unnest($1::text[]), $2, $3',
    [[hot, ...spread], ws, `${ws}_c`],
  );
  return { actors, hot, spread };
}

async function runActors(fn: (actor: number, i: number) => Promise<unknown>) {
  const samples: number[] = [];
  let failed = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: ACTORS }, async (_, a) => {
      for (let i = 0; i < OPS; i++) {
        const t = performance.now();
        try {
          await fn(a, i);
          samples.push(performance.now() - t);
        } catch {
          // A lock or statement timeout under overload: counted, not retried, not timed.
          failed++;
        }
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return {
    failed,
    writesPerS: round(samples.length / seconds, 0),
    p50: round(percentile(samples, 50), 2),
    p99: round(percentile(samples, 99), 2),
  };
}

const desiredAt = (i: number): Desired => (i % 2 === 0 ? 'present' : 'absent');

async function ticketed(pool: Pool, actors: string[], messageOf: (a: number) => string) {
  const tickets: { id: string; operationId: string }[][] = actors.map(() => []);
  await Promise.all(
    actors.map(async (actorId, a) => {
      for (let i = 0; i < OPS; i++) {
        // The ticket contract's operation IDs are UUIDv7 stamped at the choice (issue 15).
        const operationId = mintOperationId(Date.now());
        const messageId = messageOf(a);
        const intent = { messageId, emoji: '👍', desired: desiredAt(i) };
        const { ticket } = await withTx(pool, TX, (c) =>
          issueTicket(c as unknown as Queryable, {
            actorId,
            operationId,
            intent,
            admission: {
              workspaceId: actorId.split('_a')[0]!,
              conversationId: `${actorId.split('_a')[0]!}_c`,
            },
            ttlSeconds: 7 * 86_400,
            keyVersion: '1',
            // Every ticket is issued before any applies: the bench bounds itself by OPS.
            maxOutstanding: OPS,
          }),
        );
        tickets[a]!.push({ id: ticket.id, operationId });
      }
    }),
  );
  return runActors(async (a, i) => {
    const { id, operationId } = tickets[a]![i]!;
    return applyWithTicket(pool as unknown as Queryable, TX, { actorId: actors[a]! }, operationId, id, {
      messageId: messageOf(a),
      emoji: '👍',
      desired: desiredAt(i),
    });
  });
}

const BARE_UPSERT = `
  insert into private.message_reactions (message_id, actor_id, emoji) values ($1, $2, $3)
  on conflict (message_id, actor_id, emoji) do update set created_at = app_now()`;

export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const pool = stack.neon(ACTORS + 2);
  const rows: BenchRow[] = [];
  const world = await seed(pool, Date.now().toString(36));
  const cases: [string, (a: number) => string][] = [
    ['one hot message', () => world.hot],
    ['32 different messages', (a) => world.spread[a]!],
  ];
  for (const [name, messageOf] of cases) {
    // Warm every connection of the pool before timing.
    await Promise.all(Array.from({ length: ACTORS }, () => pool.query('select 1')));
    const bare = await runActors((a) => pool.query(BARE_UPSERT, [messageOf(a), world.actors[a]!, '🧱']));
    const mine = await ticketed(pool, world.actors, messageOf);
    rows.push({
      suite: 'tickets',
      case: `bare upsert, ${name}`,
      n: ACTORS * OPS,
      'writes/s': bare.writesPerS,
      failed: bare.failed,
      'p50 ms': bare.p50,
      'p99 ms': bare.p99,
    });
    rows.push({
      suite: 'tickets',
      case: `ticketed PUT (domain fn), ${name}`,
      n: ACTORS * OPS,
      'writes/s': mine.writesPerS,
      failed: mine.failed,
      'p50 ms': mine.p50,
      'p99 ms': mine.p99,
      'ratio writes/s vs bare': round(mine.writesPerS / bare.writesPerS, 3),
      'ratio p99 vs bare': round(mine.p99 / bare.p99, 2),
    });
  }
  return rows;
}
