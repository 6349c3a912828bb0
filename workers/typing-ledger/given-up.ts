import type { Q } from './types';

/**
 * The rows an operator may have to remove by hand (spec: revoked credentials, permanently
 * failing APIs or late remote writes can leave a badge needing manual removal):
 * - `abandoned`: the service gave up (seven-day expiry, over-quota migration); the badge may
 *   still be on the message, the snapshot is erased.
 * - `overdue`: still pending past its seven-day deadline (the expiry pass has not run yet:
 *   maintenance stopped, backlog); no retry is claimed for it any more.
 */
export type GivenUpState = 'abandoned' | 'overdue';

/**
 * What an operator sees of a row: ids, times, outcomes, counters. Never the snapshot (only
 * whether one is left) and no secret; `installation_present` says whether the installation
 * still exists for the row's App ID, i.e. whether a manual removal has credentials.
 */
export interface GivenUpRow {
  id: string;
  workspace_id: string;
  installation_id: string;
  app_id: string;
  source_message_id: string;
  chat_id: string | null;
  reaction_id: string | null;
  add_state: string;
  settle_outcome: string | null;
  retention_outcome: string | null;
  attempts: number;
  last_error: string | null;
  created_at: Date;
  expires_at: Date;
  abandoned_at: Date | null;
  cleaned_at: Date | null;
  last_attempt_at: Date | null;
  manual_removal_at: Date | null;
  manual_removal_outcome: string | null;
  manual_removal_code: number | null;
  snapshot_present: boolean;
  installation_present: boolean;
}

const VIEW = `r.id, r.workspace_id, r.installation_id, r.app_id, r.source_message_id, r.chat_id,
  r.reaction_id, r.add_state, r.settle_outcome, r.retention_outcome, r.attempts, r.last_error,
  r.created_at, r.expires_at, r.abandoned_at, r.cleaned_at, r.last_attempt_at,
  r.manual_removal_at, r.manual_removal_outcome, r.manual_removal_code,
  r.credential_snapshot is not null as snapshot_present,
  exists (select 1 from lark_installations i
          where i.id = r.installation_id and i.app_id = r.app_id) as installation_present`;

/**
 * One page per state, keyset-paged on (time, id) in time order: abandoned rows by
 * abandoned_at (index channel_typing_reaction_abandoned: workspace_id, abandoned_at), overdue
 * rows by expires_at (index channel_typing_reaction_expiry, live rows only: normally a
 * handful, since the expiry pass abandons them every 30 s). The cursor's time is microseconds
 * since the epoch, computed and read back in SQL, so no precision is lost between pages.
 * Only fixed identifiers are interpolated.
 */
function pageSql(state: GivenUpState): string {
  const [time, where] =
    state === 'abandoned'
      ? ['abandoned_at', 'r.abandoned_at is not null']
      : [
          'expires_at',
          'r.cleaned_at is null and r.abandoned_at is null and r.expires_at <= (select t from now)',
        ];
  return `
with now as materialized (select app_now() as t)
select ${VIEW}, (extract(epoch from r.${time}) * 1000000)::bigint::text as sort_us
from channel_typing_reaction r
where r.workspace_id = $1 and ${where}
  and ($2::bigint is null
       or (r.${time}, r.id) > (to_timestamp(0) + $2::bigint * interval '1 microsecond', $3::text))
order by r.${time}, r.id
limit $4`;
}

export interface GivenUpPage {
  rows: GivenUpRow[];
  /** Pass as `after` for the next page; null on the last one. */
  next: string | null;
}

/** `after` is `<microseconds>.<row id>` from a previous page's `next` (validated by the caller). */
export async function listGivenUp(
  q: Q,
  p: { workspaceId: string; state: GivenUpState; limit: number; after?: { us: string; id: string } },
): Promise<GivenUpPage> {
  const { rows } = await q.query<GivenUpRow & { sort_us: string }>(pageSql(p.state), [
    p.workspaceId,
    p.after?.us ?? null,
    p.after?.id ?? null,
    p.limit + 1,
  ]);
  const page = rows.slice(0, p.limit);
  const last = page[page.length - 1];
  const next = rows.length > p.limit && last ? `${last.sort_us}.${last.id}` : null;
  return { rows: page.map(({ sort_us: _, ...row }) => row), next };
}

/** One row in the same view (after a manual removal); undefined when it does not exist. */
export async function givenUpRow(q: Q, id: string): Promise<GivenUpRow | undefined> {
  const { rows } = await q.query<GivenUpRow>(
    `select ${VIEW} from channel_typing_reaction r where r.id = $1`,
    [id],
  );
  return rows[0];
}
