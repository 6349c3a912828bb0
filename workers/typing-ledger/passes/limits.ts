/**
 * The limits of the maintenance passes (spec "Retry and retention limits"). They are
 * requirements, not tuning knobs: changing one needs a capacity review.
 */
/** Expiration and pruning: each its own database budget and row cap per pass. */
export const EXPIRE_BUDGET_MS = 2000;
export const EXPIRE_LIMIT = 1000;
/**
 * The part of EXPIRE_LIMIT kept for the two-minute taskless expiry, so crash-lost timers are
 * never starved by a lifetime backlog; unused, it goes back to the backlog in the same pass.
 */
export const EXPIRE_TASKLESS_SHARE = 200;
export const PRUNE_BUDGET_MS = 2000;
export const PRUNE_LIMIT = 1000;
/** A taskless indicator expires this long after registration. */
export const TASKLESS_EXPIRY_MS = 2 * 60_000;
/** Tombstones are deleted this long after their terminal timestamp. */
export const TOMBSTONE_RETENTION_MS = 7 * 86_400_000;
/** The webhook's dedup receipts: a small bounded step of its own. */
export const RECEIPTS_BUDGET_MS = 1000;
export const RECEIPTS_LIMIT = 1000;
/** Remote retry: rows per claim, pass budget, per remote operation budget. */
export const RETRY_CLAIM_LIMIT = 100;
export const RETRY_PASS_BUDGET_MS = 10_000;
export const RETRY_OP_BUDGET_MS = 2000;
/** Backoff after the n-th claim: 30 s · 2^(n-1), at most one hour. */
export const BACKOFF_BASE_MS = 30_000;
export const BACKOFF_MAX_MS = 3_600_000;
/**
 * Remote operations in flight at once. 100 rows × 2 s at 25 wide is 4 waves = 8 s, inside
 * the 10 s pass budget even when every call runs into its per-operation budget.
 */
export const RETRY_CONCURRENCY = 25;

/** Test and capacity-run scoping: restrict a pass to some workspaces. Production passes none. */
export interface PassScope {
  workspaceIds?: string[];
}

export const scopeParam = (scope?: PassScope) => scope?.workspaceIds ?? null;
