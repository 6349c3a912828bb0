import type { Pool } from '@neondatabase/serverless';
import { z } from 'zod';
import { log } from '../log';

/** An operator's name as recorded with each action (console sign-in, admin settings changes). */
export const Operator = z
  .string()
  .trim()
  .min(1)
  .max(200)
  .regex(/^[^\p{Cc}]+$/u);

export interface AuditEntry {
  operator: string;
  action: string;
  target: string | null;
  outcome: string;
  requestId: string;
}

/**
 * One console_audit row per action, done or refused, written after the action (its outcome
 * is what gets recorded). A failed write is logged once with the same fields, so the action
 * is never lost from the record even when the database is what failed.
 */
export async function recordAction(pool: Pool, e: AuditEntry): Promise<void> {
  await pool
    .query(
      `insert into console_audit (operator, action, target, outcome, request_id)
       values ($1, $2, $3, left($4, 200), left($5, 200))`,
      [e.operator, e.action, e.target, e.outcome, e.requestId],
    )
    .catch((err: unknown) => log.error('console_audit_write_failed', { ...e, error: err }));
  log.info('console_action', { ...e });
}
