-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Retry/sweep claims: pending rows by their next attempt (maintenance pass, SKIP LOCKED).
create index concurrently if not exists channel_typing_reaction_retry
  on channel_typing_reaction (next_attempt_at)
  where cleaned_at is null and abandoned_at is null;
