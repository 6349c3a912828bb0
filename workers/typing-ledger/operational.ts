/**
 * The spec's read-only operational query, per workspace, on app_now() (the database clock).
 * Counts and timestamps only: no snapshot, no message or reaction id leaves this route.
 */
export const OPERATIONAL_QUERY = `
select workspace_id,
  count(*) filter (where cleaned_at is null and abandoned_at is null)::int as pending,
  count(*) filter (where cleaned_at is null and abandoned_at is null
                   and created_at <= app_now() - interval '7 days')::int as overdue_redaction,
  count(*) filter (where abandoned_at is not null)::int as abandoned,
  min(created_at) filter (where cleaned_at is null and abandoned_at is null) as oldest_pending
from channel_typing_reaction
group by workspace_id
order by workspace_id`;

export interface WorkspaceTypingStatus {
  workspace_id: string;
  pending: number;
  overdue_redaction: number;
  abandoned: number;
  oldest_pending: Date | null;
}
