-- migrate:no-transaction
-- Retry/sweep claims: pending rows by their next attempt (maintenance pass, SKIP LOCKED).
create index concurrently if not exists channel_typing_reaction_retry
  on channel_typing_reaction (next_attempt_at)
  where cleaned_at is null and abandoned_at is null;
