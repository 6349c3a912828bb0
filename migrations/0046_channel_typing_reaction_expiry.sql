-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Seven-day maximum lifetime: live rows by their deadline (expiration pass, SKIP LOCKED, 1,000/pass).
create index concurrently if not exists channel_typing_reaction_expiry
  on channel_typing_reaction (expires_at)
  where cleaned_at is null and abandoned_at is null;
