import type { Pool } from '@neondatabase/serverless';
import { z } from 'zod';
import { withTx } from '../db/tx';
import { AppError } from '../errors';
import { INSTALLATION_ID } from '../installations/store';

/**
 * Operator handling of dead-lettered mailbox messages in bulk (issue 33 items 4 and 5): every
 * message dead-lettered in one installation's conversations (channel_conversations.id is the
 * actor instance) whose death time (`dead_at_ms`) lies in a closed range, one page a request.
 * The admin routes (workers/admin/dead-letters.ts) and the console's actions
 * (workers/console/actions.ts) share this module.
 *
 * - A preview changes nothing: the count (capped), the first page of ids, the range it
 *   counted (its end closed at the database's time of the preview) and the first page's cursor.
 * - A requeue or discard takes that range and a page cursor back: it needs a preview. A
 *   message that dies after the preview has a later `dead_at_ms` and is never touched without a
 *   new preview; nor is a requeued message that died again.
 * - A page is a fixed key interval, `<dead_at_ms>.<id>` after `<dead_at_ms>.<id>` up to and
 *   including, read when the page before it ran (or at the preview), so it holds at most that
 *   request's limit of rows, and no row can enter it later (a death is never back-dated).
 *   Repeating a request touches the same interval, whose rows are no longer dead: it changes
 *   nothing more. Each answer names the next interval (`next`), null after the last page.
 * - A page is one statement: the interval read from the statement's snapshot, then each row
 *   changed only while it is still the same dead row (`state = 'dead'` and the same
 *   `dead_at_ms`). A second request racing on one page waits on the first's row locks, then
 *   finds those rows no longer dead (Postgres re-reads a row updated under it) and skips them:
 *   each row is requeued once.
 */

/** At most this many rows a request (issue 33: bulk actions are bounded). */
export const BULK_MAX = 1000;
/** The preview's count stops here: its cost is bounded by the cap, not by the backlog. */
export const BULK_COUNT_CAP = 100_000;

export type BulkAction = 'requeue' | 'discard';

export interface BulkBounds {
  installation: string;
  fromMs: number;
  toMs: number;
}

/** A position in the range's order: death time, then id. */
interface Key {
  deadAtMs: number;
  id: string;
}

export interface BulkPage {
  /** Rows of the next page (the one an answer names in `next`), and of a preview's first. */
  limit: number;
  /** The page to act on: keys after `after`, up to and including `through`. */
  interval: { after: Key; through: Key } | null;
}

/** The raw fields of a request, from JSON (admin) or a form (console). */
export const BulkInput = z.strictObject({
  installation: z.string().max(100),
  from: z.string().max(40).optional(),
  to: z.string().max(40).optional(),
  limit: z.coerce.number().int().min(1).max(BULK_MAX).optional(),
  cursor: z.string().max(80).optional(),
});
export type BulkInput = z.infer<typeof BulkInput>;

const Instant = z.iso.datetime({ offset: true });
const CURSOR = /^(\d{1,15})\.(\d{1,18})-(\d{1,15})\.(\d{1,18})$/;
const START: Key = { deadAtMs: 0, id: '0' };

function instant(field: 'from' | 'to', raw: string | undefined): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  const parsed = Instant.safeParse(raw);
  const ms = parsed.success ? Date.parse(parsed.data) : Number.NaN;
  if (!Number.isFinite(ms) || ms < 0)
    throw new AppError('validation_failed', 'Request validation failed', [
      { path: [field], message: 'an ISO 8601 date-time with an offset (2026-12-02T14:00:00Z)' },
    ]);
  return ms;
}

const before = (a: Key, b: Key) =>
  a.deadAtMs < b.deadAtMs || (a.deadAtMs === b.deadAtMs && BigInt(a.id) < BigInt(b.id));

function cursorOf(raw: string, b: Omit<BulkBounds, 'installation'>) {
  const m = CURSOR.exec(raw);
  if (m) {
    const after = { deadAtMs: Number(m[1]), id: m[2]! };
    const through = { deadAtMs: Number(m[3]), id: m[4]! };
    if (before(after, through) && through.deadAtMs >= b.fromMs && through.deadAtMs <= b.toMs)
      return { after, through };
  }
  throw new AppError(
    'cursor_invalid',
    'Not a page of this range: send the `cursor` of the preview or the `next` of a page',
  );
}

/**
 * Validates a request before anything is read or written: an installation id of the wrong
 * form, a date-time that is not one or a limit outside 1..1,000 is 400 `validation_failed`,
 * `from` after `to` 400 `range_invalid`, a cursor that is not a page of the range 400
 * `cursor_invalid`, and an action without a preview's range and cursor (no `to`, `to` after the
 * database's now, or no cursor) 400 `preview_required`.
 */
export function parseBulk(
  input: BulkInput,
  mode: 'preview' | BulkAction,
  nowMs: number,
): { bounds: BulkBounds; page: BulkPage } {
  if (!INSTALLATION_ID.test(input.installation))
    throw new AppError('validation_failed', 'Request validation failed', [
      { path: ['installation'], message: 'an installation id (li_…)' },
    ]);
  const fromMs = instant('from', input.from) ?? 0;
  const requestedTo = instant('to', input.to);
  const toMs = Math.min(requestedTo ?? nowMs, nowMs);
  if (fromMs > (requestedTo ?? toMs)) throw new AppError('range_invalid', '`from` is after `to`');
  const limit = input.limit ?? BULK_MAX;
  const bounds = { installation: input.installation, fromMs, toMs };
  if (mode === 'preview') return { bounds, page: { limit, interval: null } };
  if (requestedTo === undefined || requestedTo > nowMs || !input.cursor)
    throw new AppError(
      'preview_required',
      'Send the range and the cursor a preview returned (its `to` is the time of the preview)',
    );
  return { bounds, page: { limit, interval: cursorOf(input.cursor, bounds) } };
}

/** The range's dead rows (`$1` installation, `$2`..`$3` death times), as `m`. */
const IN_RANGE = `
  actor_mailbox m join channel_conversations c on c.id = m.instance_id
  where m.state = 'dead' and c.installation_id = $1
    and m.dead_at_ms >= $2::bigint and m.dead_at_ms <= $3::bigint`;

/** The `limit` ($6) rows after key ($4, $5): a preview's first page, or the page after this one. */
const FOLLOWING = `
  select m.id, m.dead_at_ms from ${IN_RANGE}
    and (m.dead_at_ms, m.id) > ($4::bigint, $5::bigint)
  order by m.dead_at_ms, m.id limit $6`;

const LAST = (cte: string) =>
  `(select p.dead_at_ms || '.' || p.id from ${cte} p order by p.dead_at_ms desc, p.id desc limit 1)`;

const PREVIEW = `
with counted as (select 1 from ${IN_RANGE} limit $7),
page as (${FOLLOWING})
select (select count(*) from counted)::int as count,
  coalesce((select json_agg(p.id::text order by p.dead_at_ms, p.id) from page p), '[]'::json) as ids,
  ${LAST('page')} as last`;

/** The change per action, fenced on the row being the same dead row the page read. */
const CHANGE: Record<BulkAction, string> = {
  requeue: `update actor_mailbox m
    set state = 'pending', attempts = 0, dead_at_ms = null, available_at_ms = app_now_ms()
    from page p where m.id = p.id and m.state = 'dead' and m.dead_at_ms = p.dead_at_ms
    returning m.id, m.instance_id`,
  discard: `delete from actor_mailbox m using page p
    where m.id = p.id and m.state = 'dead' and m.dead_at_ms = p.dead_at_ms
    returning m.id, m.instance_id`,
};

/**
 * One page: its interval ($7, $8 after; $4, $5 through), at most BULK_MAX rows whatever the
 * cursor says, changed; then the next page ($6 rows) read after where this one stopped: its
 * `through`, or its last row when it was cut at BULK_MAX (a hand-made cursor spanning more),
 * so no row of the range is skipped.
 */
const ACT = (a: BulkAction) => `
with page as (
  select m.id, m.dead_at_ms from ${IN_RANGE}
    and (m.dead_at_ms, m.id) > ($7::bigint, $8::bigint)
    and (m.dead_at_ms, m.id) <= ($4::bigint, $5::bigint)
  order by m.dead_at_ms, m.id limit ${BULK_MAX}),
changed as (${CHANGE[a]}),
stopped as (
  select coalesce(
    (select array[p.dead_at_ms, p.id] from page p where (select count(*) from page) = ${BULK_MAX}
      order by p.dead_at_ms desc, p.id desc limit 1),
    array[$4::bigint, $5::bigint]) as k),
following as (
  select m.id, m.dead_at_ms from stopped s, ${IN_RANGE}
    and (m.dead_at_ms, m.id) > (s.k[1], s.k[2])
  order by m.dead_at_ms, m.id limit $6)
select coalesce((select json_agg(id::text order by id) from changed), '[]'::json) as ids,
  coalesce((select json_agg(distinct instance_id) from changed), '[]'::json) as instances,
  (select k[1] || '.' || k[2] from stopped) as stopped,
  ${LAST('following')} as last`;

export interface BulkPreview {
  installation: string;
  from: string;
  to: string;
  count: number;
  countCapped: boolean;
  /** The first page's ids (at most `limit`). */
  ids: string[];
  /** The first page to act on, null when nothing matches. */
  cursor: string | null;
}

export interface BulkResult {
  action: BulkAction;
  installation: string;
  from: string;
  to: string;
  /** Rows this request changed (a repeat, or the loser of a race, changes none of the same). */
  changed: number;
  ids: string[];
  /** The instances whose hosts the caller wakes after commit (requeue only). */
  instances: string[];
  /** The next page's cursor, null when no dead row of the range follows this page. */
  next: string | null;
}

const iso = (ms: number) => new Date(ms).toISOString();
const key = (k: Key) => `${k.deadAtMs}.${k.id}`;

/** The database's now, in ms (the clock `dead_at_ms` is written on). */
export async function dbNowMs(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ ms: string }>('select app_now_ms()::text as ms');
  return Number(rows[0]!.ms);
}

export async function previewDeadLetters(pool: Pool, b: BulkBounds, p: BulkPage): Promise<BulkPreview> {
  const { rows } = await withTx(pool, { budgetMs: 10_000, maxAttempts: 1 }, (tx) =>
    tx.query<{ count: number; ids: string[]; last: string | null }>(PREVIEW, [
      b.installation,
      b.fromMs,
      b.toMs,
      START.deadAtMs,
      START.id,
      p.limit,
      BULK_COUNT_CAP,
    ]),
  );
  const r = rows[0]!;
  return {
    installation: b.installation,
    from: iso(b.fromMs),
    to: iso(b.toMs),
    count: r.count,
    countCapped: r.count >= BULK_COUNT_CAP,
    ids: r.ids,
    cursor: r.last ? `${key(START)}-${r.last}` : null,
  };
}

/**
 * One page of a requeue or discard: one statement in its own transaction (local statement and
 * lock budgets; a deadlock retried, which is safe: the statement is fenced). Hosts are the
 * caller's to wake, after this has committed.
 */
export async function actOnDeadLetters(
  pool: Pool,
  action: BulkAction,
  b: BulkBounds,
  p: BulkPage,
): Promise<BulkResult> {
  const { after, through } = p.interval!;
  const { rows } = await withTx(pool, { budgetMs: 15_000, maxAttempts: 3 }, (tx) =>
    tx.query<{ ids: string[]; instances: string[]; stopped: string; last: string | null }>(ACT(action), [
      b.installation,
      b.fromMs,
      b.toMs,
      through.deadAtMs,
      through.id,
      p.limit,
      after.deadAtMs,
      after.id,
    ]),
  );
  const r = rows[0]!;
  return {
    action,
    installation: b.installation,
    from: iso(b.fromMs),
    to: iso(b.toMs),
    changed: r.ids.length,
    ids: r.ids,
    instances: action === 'requeue' ? r.instances : [],
    next: r.last ? `${r.stopped}-${r.last}` : null,
  };
}
