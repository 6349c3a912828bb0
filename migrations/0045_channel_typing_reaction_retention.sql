-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Retention outcome of a ledger row (docs/typing-maintenance.md). Nullable, no default: adding
-- it is a catalog-only change, no table rewrite. The quota slot column already exists (0040).
--   cleaned           badge confirmed gone (cleaned_at)
--   taskless_expired  2-minute taskless expiry: badge withdrawal owed, input NOT settled
--   expired           7-day maximum lifetime reached (abandoned_at, snapshot erased)
--   over_quota        abandoned by migration 0049: beyond the workspace's 1,000 pending slots
-- No foreign keys, no cascades.
alter table channel_typing_reaction
  add column if not exists retention_outcome text
    check (retention_outcome in ('cleaned', 'taskless_expired', 'expired', 'over_quota'));
