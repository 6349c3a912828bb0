import { DurableObject } from 'cloudflare:workers';
import { z } from 'zod';
import type { Env } from '../workers/env';

/**
 * One per workspace: bounds ticket issuance per actor. Two fences in SQLite storage:
 *  - rate: a token bucket per actor (capacity = the per-minute rate, refilled continuously);
 *  - outstanding: one lease per issued, not yet applied/retired/expired ticket.
 * A lease is released when its operation applies or retires (best effort from the Worker).
 * A lost release cannot wedge an actor: when the bound is hit, the Worker reconciles the
 * leases against the database's outstanding tickets (the source of truth) and asks again.
 * Requests for one workspace run one at a time here, so the bound is exact.
 */
export const ReserveInput = z.object({
  actorId: z.string().min(1).max(128),
  operationId: z.string().min(1).max(64),
  ttlMs: z.number().int().positive(),
  maxOutstanding: z.number().int().positive(),
  ratePerMinute: z.number().int().positive(),
});
export type ReserveInput = z.infer<typeof ReserveInput>;

/** Flat (not a union) so the RPC stub types stay simple. `reason` is null when ok. */
export interface ReserveResult {
  ok: boolean;
  reason: 'rate' | 'outstanding' | null;
  retryAfterSeconds: number;
  outstanding: number;
}

const MAX_OUTSTANDING_RETRY_S = 60;

export class WorkspaceQuota extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.blockConcurrencyWhile(async () => {
      ctx.storage.sql.exec(`create table if not exists leases (
        actor_id text not null, operation_id text not null, expires_at integer not null,
        primary key (actor_id, operation_id))`);
      ctx.storage.sql.exec(`create table if not exists buckets (
        actor_id text primary key, tokens real not null, updated_at integer not null)`);
    });
  }

  async reserveTicket(raw: ReserveInput): Promise<ReserveResult> {
    const input = ReserveInput.parse(raw);
    const now = Date.now();
    const sql = this.ctx.storage.sql;
    sql.exec('delete from leases where actor_id = ? and expires_at <= ?', input.actorId, now);
    const held = sql
      .exec<{ n: number }>(
        'select count(*) as n from leases where actor_id = ? and operation_id = ?',
        input.actorId,
        input.operationId,
      )
      .one().n;
    // A retried issuance of the same operation holds its lease already: no new ticket, no charge.
    if (held > 0)
      return { ok: true, reason: null, retryAfterSeconds: 0, outstanding: this.count(input.actorId) };

    const outstanding = this.count(input.actorId);
    if (outstanding >= input.maxOutstanding) {
      const first = sql
        .exec<{ at: number }>('select min(expires_at) as at from leases where actor_id = ?', input.actorId)
        .one().at;
      const retry = Math.ceil((first - now) / 1000);
      return {
        ok: false,
        reason: 'outstanding',
        retryAfterSeconds: clamp(retry, 1, MAX_OUTSTANDING_RETRY_S),
        outstanding,
      };
    }

    const perMs = input.ratePerMinute / 60_000;
    const bucket = sql
      .exec<{ tokens: number; updated_at: number }>(
        'select tokens, updated_at from buckets where actor_id = ?',
        input.actorId,
      )
      .toArray()[0];
    const tokens = bucket
      ? Math.min(input.ratePerMinute, bucket.tokens + (now - bucket.updated_at) * perMs)
      : input.ratePerMinute;
    if (tokens < 1) {
      sql.exec(
        'update buckets set tokens = ?, updated_at = ? where actor_id = ?',
        tokens,
        now,
        input.actorId,
      );
      const retryAfterSeconds = Math.max(1, Math.ceil((1 - tokens) / perMs / 1000));
      return { ok: false, reason: 'rate', retryAfterSeconds, outstanding };
    }
    sql.exec(
      'insert into buckets (actor_id, tokens, updated_at) values (?, ?, ?) on conflict (actor_id) do update set tokens = excluded.tokens, updated_at = excluded.updated_at',
      input.actorId,
      tokens - 1,
      now,
    );
    sql.exec(
      'insert into leases (actor_id, operation_id, expires_at) values (?, ?, ?)',
      input.actorId,
      input.operationId,
      now + input.ttlMs,
    );
    return { ok: true, reason: null, retryAfterSeconds: 0, outstanding: outstanding + 1 };
  }

  /** The operation applied, retired, was refused or expired: its slot is free. Idempotent. */
  async releaseTicket(actorId: string, operationId: string): Promise<void> {
    this.ctx.storage.sql.exec(
      'delete from leases where actor_id = ? and operation_id = ?',
      actorId,
      operationId,
    );
  }

  /** Keeps only the leases the database still counts as outstanding (at most 1000 IDs). */
  async reconcileOutstanding(actorId: string, liveOperationIds: string[]): Promise<number> {
    const live = new Set(z.array(z.string().max(64)).max(1000).parse(liveOperationIds));
    const sql = this.ctx.storage.sql;
    const leases = sql
      .exec<{ operation_id: string }>('select operation_id from leases where actor_id = ?', actorId)
      .toArray();
    let dropped = 0;
    for (const { operation_id } of leases) {
      if (live.has(operation_id)) continue;
      sql.exec('delete from leases where actor_id = ? and operation_id = ?', actorId, operation_id);
      dropped++;
    }
    return dropped;
  }

  async outstanding(actorId: string): Promise<number> {
    return this.count(actorId);
  }

  private count(actorId: string): number {
    return this.ctx.storage.sql
      .exec<{ n: number }>(
        'select count(*) as n from leases where actor_id = ? and expires_at > ?',
        actorId,
        Date.now(),
      )
      .one().n;
  }
}

function clamp(n: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, n));
}
