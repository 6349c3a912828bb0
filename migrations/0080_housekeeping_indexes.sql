-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Housekeeping (docs/retention-rules.md, workers/housekeeping/): each minute step is one
-- bounded index range scan in age order, so its cost is the batch, not the table.
-- Terminal turns by settlement time (channel_turns rule).
create index concurrently if not exists channel_turns_settled
  on channel_turns (settled_at) where settled_at is not null;
-- Inputs by age (lark_inbound_messages rule).
create index concurrently if not exists lark_inbound_messages_created
  on lark_inbound_messages (created_at);
-- Idle conversations by last input (channel_conversations rule).
create index concurrently if not exists channel_conversations_updated
  on channel_conversations (updated_at);
-- Live (not terminal) ledger rows by session and position: a turn, an input or a
-- conversation is kept while one of these still needs it. Partial, so its size is the
-- pending work (at most 1,000 rows per workspace), not the ledger's history.
create index concurrently if not exists channel_typing_reaction_live_session
  on channel_typing_reaction (session_id, context_revision, input_position)
  where cleaned_at is null and abandoned_at is null;
