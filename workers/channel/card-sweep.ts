import { withDb } from '../db/pool';
import { type Env, loadConfig } from '../env';
import { log } from '../log';
import { finishLeftoverCard } from './reply';
import { unfinishedSettledCards } from './reply-cards';

/** Cards finished per minute at most, and the time the sweep may take. */
export const CARD_SWEEP_LIMIT = 20;
export const CARD_SWEEP_BUDGET_MS = 15_000;

/**
 * The backstop of "every card finished" (issue 34): a card still streaming a minute after its
 * turn settled is finished here, with the interrupted notice in the card's language (or only
 * streaming off for a delivered turn). That happens when the settlement's finish failed all its
 * attempts (Lark down for longer), or the turn was settled by a release that knows no cards
 * (a rollback during a rollout, docs/operations.md "Two versions at once"). No lock is held:
 * the candidates are read in one statement, each card then finished by its own statements
 * around the Lark call. One failure is logged and the sweep goes on; the next minute retries.
 */
export async function sweepUnfinishedCards(env: Env): Promise<{ finished: number; failed: number }> {
  const config = loadConfig(env);
  const started = Date.now();
  const cards = await withDb(config, (pool) => unfinishedSettledCards(pool, CARD_SWEEP_LIMIT));
  let finished = 0;
  let failed = 0;
  for (const card of cards) {
    if (Date.now() - started > CARD_SWEEP_BUDGET_MS) break;
    try {
      await finishLeftoverCard({ config: () => config }, config, {
        sessionId: card.sessionId,
        turnNo: card.turnNo,
        installationId: card.installationId,
        outcome: card.delivered ? 'delivered' : 'failed',
      });
      finished++;
    } catch (error) {
      failed++;
      log.warn('channel_card_sweep_card_failed', { sessionId: card.sessionId, turnNo: card.turnNo, error });
    }
  }
  return { finished, failed };
}
