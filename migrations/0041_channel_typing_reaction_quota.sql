-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Quota arbitration: at most one pending row per (workspace, slot); slots run 1..1000.
create unique index concurrently if not exists channel_typing_reaction_quota
  on channel_typing_reaction (workspace_id, quota_slot) where quota_slot is not null;
