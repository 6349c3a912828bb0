import { DurableObject } from 'cloudflare:workers';
import { z } from 'zod';
import type { Env } from '../workers/env';

/**
 * One per workspace: the per-actor issuance RATE (a token bucket in SQLite storage, capacity
 * = the per-minute rate, refilled continuously). Requests for one workspace run one at a
 * time here and the bucket is durable storage, so the rate is exact.
 *
 * The outstanding bound is not kept here: the database counts an actor's outstanding tickets
 * under a per-actor lock in the transaction that inserts the ticket (workers/reaction-tickets/
 * tickets.ts), so no lease can be lost, double-released or reset with this object's state.
 */
export const ChargeInput = z.object({
  actorId: z.string().min(1).max(128),
  ratePerMinute: z.number().int().positive(),
});
export type ChargeInput = z.infer<typeof ChargeInput>;

/** Flat (not a union) so the RPC stub types stay simple. */
export interface ChargeResult {
  ok: boolean;
  retryAfterSeconds: number;
}

/**
 * A bucket untouched this long is full again whatever the rate: its capacity is the per-minute
 * rate and it refills at that rate, so from empty it takes one minute. A full bucket is what no
 * row means, so such rows are deleted (exactly, not approximately).
 */
export const BUCKET_FULL_AFTER_MS = 60_000;
/** Rows pruned per charge at most: the work a charge does stays bounded however many idle. */
const PRUNE_PER_CHARGE = 100;

export class WorkspaceQuota extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.blockConcurrencyWhile(async () => {
      // Leases of the outstanding bound lived here before the database owned that bound.
      ctx.storage.sql.exec('drop table if exists leases');
      ctx.storage.sql.exec(`create table if not exists buckets (
        actor_id text primary key, tokens real not null, updated_at integer not null)`);
      ctx.storage.sql.exec('create index if not exists buckets_updated_at on buckets (updated_at)');
    });
  }

  /** Takes one issuance token from the actor's bucket, or says how long until one refills. */
  async chargeIssuance(raw: ChargeInput): Promise<ChargeResult> {
    const input = ChargeInput.parse(raw);
    const now = Date.now();
    const sql = this.ctx.storage.sql;
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
    const left = tokens < 1 ? tokens : tokens - 1;
    sql.exec(
      'insert into buckets (actor_id, tokens, updated_at) values (?, ?, ?) on conflict (actor_id) do update set tokens = excluded.tokens, updated_at = excluded.updated_at',
      input.actorId,
      left,
      now,
    );
    // Buckets that have refilled are the same as no row (issue 29: rows were never pruned).
    sql.exec(
      'delete from buckets where actor_id in (select actor_id from buckets where updated_at < ? limit ?)',
      now - BUCKET_FULL_AFTER_MS,
      PRUNE_PER_CHARGE,
    );
    if (tokens < 1)
      return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - tokens) / perMs / 1000)) };
    return { ok: true, retryAfterSeconds: 0 };
  }
}
