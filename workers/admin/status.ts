import { Hono } from 'hono';
import type { AppEnv } from '../context';
import { withTx } from '../db/tx';
import { requireAdmin } from '../middleware';
import { getLegacyContractStatus } from '../reaction-tickets/contract';
import { retentionOwner } from '../retention/routes';
import { typingMaintenance } from '../typing-ledger/admin-routes';

/** Counts stop here: the status view must stay cheap however large a backlog grows. */
const COUNT_CAP = 10_000;

/**
 * Backlogs that should stay near zero, each counted through a partial index and capped, so
 * the query cost is bounded by COUNT_CAP rather than by table size.
 */
const BACKLOG_QUERY = `
select
  (select count(*) from (select 1 from effects where status = 'pending' limit $1) s)::int as effects_pending,
  (select count(*) from (select 1 from effects where status = 'processing' limit $1) s)::int as effects_processing,
  (select count(*) from (select 1 from actor_mailbox where state = 'pending' limit $1) s)::int as mailbox_pending,
  (select count(*) from effect_processes where stopped_at_ms is null)::int as live_processes,
  (select count(*) from (select 1 from channel_typing_reaction
     where cleaned_at is null and abandoned_at is null limit $1) s)::int as typing_pending,
  app_now() as db_now`;

/**
 * GET /admin/status: one page for the operator. Database reachability and backlogs, the two
 * singleton owners' control state, and the legacy write contract. No identifiers of actors,
 * messages or conversations and no secret ever appear here.
 */
export const adminStatus = new Hono<AppEnv>().get('/', requireAdmin(), async (c) => {
  const started = Date.now();
  const database = await withTx(c.var.db(), { budgetMs: 3000, maxAttempts: 1 }, async (tx) => ({
    backlog: (await tx.query(BACKLOG_QUERY, [COUNT_CAP])).rows[0],
    legacyContract: await getLegacyContractStatus(tx),
  })).catch(() => null);
  const [typing, retention] = await Promise.all([
    typingMaintenance(c.env)
      .status()
      .catch(() => null),
    retentionOwner(c.env)
      .status()
      .catch(() => null),
  ]);
  return c.json(
    {
      status: database ? 'ok' : 'degraded',
      db: database ? 'ok' : 'down',
      countCap: COUNT_CAP,
      backlog: database?.backlog ?? null,
      legacyContract: database?.legacyContract ?? null,
      typingMaintenance: typing,
      retentionCleanup: retention,
      latencyMs: Date.now() - started,
    },
    database ? 200 : 503,
  );
});
