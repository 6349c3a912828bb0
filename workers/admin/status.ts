import { Hono } from 'hono';
import type { AppEnv } from '../context';
import { withTx } from '../db/tx';
import { log } from '../log';
import { requireAdmin } from '../middleware';
import { getLegacyContractStatus } from '../reaction-tickets/contract';
import { retentionOwner } from '../retention/routes';
import { typingMaintenance } from '../typing-ledger/admin-routes';

/** Counts stop here: the status view must stay cheap however large a backlog grows. */
export const COUNT_CAP = 10_000;

/**
 * Backlogs that should stay near zero, each counted through a partial index and capped, so
 * the query cost is bounded by COUNT_CAP rather than by table size (effect_processes has no
 * such index; it is small, pruned daily, and capped too).
 *
 * Processes: live means not stopped and heartbeating within EFFECT_STALE_AFTER_MS ($2), the
 * same floor recovery uses. An ActorHost registers one process and heartbeats it only while
 * it holds claims, and never stops it, so an idle host's process goes stale by design and is
 * pruned a day later. Counting every unstopped row as live, `npm run dev` reported 51 live
 * processes (one per conversation that had taken a turn) when none had beaten for 35 s. Stale
 * ones are reported apart; recovery decides per effect whether a stale owner matters.
 *
 * Dead recovery callbacks (`effect:<id>:recovery` dead-lettered: the actor never learned of a
 * retirement) are counted apart from other dead letters; the dead index keeps it small.
 */
export const BACKLOG_QUERY = `
with now as (select app_now_ms() as ms)
select
  (select count(*) from (select 1 from effects where status = 'pending' limit $1) s)::int as effects_pending,
  (select count(*) from (select 1 from effects where status = 'processing' limit $1) s)::int as effects_processing,
  (select count(*) from (select 1 from actor_mailbox where state = 'pending' limit $1) s)::int as mailbox_pending,
  (select count(*) from (select 1 from actor_mailbox where state = 'dead'
     and message_key like 'effect:%:recovery' limit $1) s)::int as dead_recovery_callbacks,
  (select count(*) from (select 1 from effect_processes, now where stopped_at_ms is null
     and heartbeat_at_ms >= now.ms - $2::bigint limit $1) s)::int as live_processes,
  (select count(*) from (select 1 from effect_processes, now where stopped_at_ms is null
     and heartbeat_at_ms < now.ms - $2::bigint limit $1) s)::int as stale_processes,
  (select count(*) from (select 1 from channel_typing_reaction
     where cleaned_at is null and abandoned_at is null limit $1) s)::int as typing_pending,
  app_now() as db_now`;

type StatusPart = 'database' | 'typingMaintenance' | 'retentionCleanup';

/** A part that cannot be read shows as null; the failure is logged once, never dropped. */
function orNull<T>(part: StatusPart, read: Promise<T>): Promise<T | null> {
  return read.catch((err: unknown) => {
    log.error('admin_status_read_failed', { part, error: err });
    return null;
  });
}

/**
 * GET /admin/status: one page for the operator. Database reachability and backlogs, the two
 * singleton owners' control state, and the legacy write contract. No identifiers of actors,
 * messages or conversations and no secret ever appear here.
 */
export const adminStatus = new Hono<AppEnv>().use('*', requireAdmin()).get('/', async (c) => {
  const started = Date.now();
  const staleAfterMs = c.var.config.EFFECT_STALE_AFTER_MS;
  const [database, typing, retention] = await Promise.all([
    orNull(
      'database',
      withTx(c.var.db(), { budgetMs: 3000, maxAttempts: 1 }, async (tx) => ({
        backlog: (await tx.query(BACKLOG_QUERY, [COUNT_CAP, staleAfterMs])).rows[0],
        legacyContract: await getLegacyContractStatus(tx),
      })),
    ),
    orNull('typingMaintenance', typingMaintenance(c.env).status()),
    orNull('retentionCleanup', retentionOwner(c.env).status()),
  ]);
  return c.json(
    {
      status: database ? 'ok' : 'degraded',
      db: database ? 'ok' : 'down',
      countCap: COUNT_CAP,
      processStaleAfterMs: staleAfterMs,
      backlog: database?.backlog ?? null,
      legacyContract: database?.legacyContract ?? null,
      typingMaintenance: typing,
      retentionCleanup: retention,
      latencyMs: Date.now() - started,
    },
    database ? 200 : 503,
  );
});
