-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Settlement enumeration: every unsettled input of a session up to a cutoff in a revision.
create index concurrently if not exists channel_typing_reaction_session
  on channel_typing_reaction (session_id, context_revision, input_position)
  where settled_at is null and cleaned_at is null and abandoned_at is null;
