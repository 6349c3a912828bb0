-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Two-minute taskless expiry: unsettled taskless rows by registration time.
create index concurrently if not exists channel_typing_reaction_taskless
  on channel_typing_reaction (created_at)
  where taskless and settled_at is null and cleaned_at is null and abandoned_at is null;
