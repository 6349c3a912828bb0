-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Terminal records (success and failure tombstones) by their terminal timestamp: the pruning
-- pass deletes them seven days later (SKIP LOCKED, 1,000/pass).
create index concurrently if not exists channel_typing_reaction_terminal
  on channel_typing_reaction ((coalesce(cleaned_at, abandoned_at)))
  where cleaned_at is not null or abandoned_at is not null;
-- Abandoned records per workspace, for the operational status query and alerts.
create index concurrently if not exists channel_typing_reaction_abandoned
  on channel_typing_reaction (workspace_id, abandoned_at)
  where abandoned_at is not null;
-- Settlement cutoffs by age, for the pruning pass.
create index concurrently if not exists channel_typing_settlement_created
  on channel_typing_settlement (created_at);
