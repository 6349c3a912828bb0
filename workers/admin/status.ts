import { Hono } from 'hono';
import type { AppEnv } from '../context';
import { withTx } from '../db/tx';
import { log } from '../log';
import { requireAdmin } from '../middleware';
import { getLegacyContractStatus } from '../reaction-tickets/contract';
import { retentionOwner } from '../retention/owner';
import { typingMaintenance } from '../typing-ledger/maintenance';
import { BACKLOG_QUERY, COUNT_CAP } from './backlog';

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
