import type { Pool } from '@neondatabase/serverless';
import { applyWithTicket } from '../../workers/reaction-tickets/ticket-call';
import type { Queryable } from '../../workers/reaction-tickets/types';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';
import { BARE_UPSERT, desiredAt, issueTickets, seedTicketWorld, type TicketWorld } from '../lib/ticket-world';

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

async function ticketed(pool: Pool, world: TicketWorld, messageOf: (a: number) => string) {
  const tickets = await issueTickets(pool, world, messageOf, OPS);
  return runActors(async (a, i) => {
    const { id, operationId } = tickets[a]![i]!;
    return applyWithTicket(pool as unknown as Queryable, TX, { actorId: world.actors[a]! }, operationId, id, {
      messageId: messageOf(a),
      emoji: '👍',
      desired: desiredAt(i),
    });
  });
}

export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const pool = stack.neon(ACTORS + 2);
  const rows: BenchRow[] = [];
  const world = await seedTicketWorld(pool, `bench_${Date.now().toString(36)}`, ACTORS);
  const cases: [string, (a: number) => string][] = [
    ['one hot message', () => world.hot],
    ['32 different messages', (a) => world.spread[a]!],
  ];
  for (const [name, messageOf] of cases) {
    // Warm every connection of the pool before timing.
    await Promise.all(Array.from({ length: ACTORS }, () => pool.query('select 1')));
    const bare = await runActors((a) => pool.query(BARE_UPSERT, [messageOf(a), world.actors[a]!, '🧱']));
    const mine = await ticketed(pool, world, messageOf);
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
