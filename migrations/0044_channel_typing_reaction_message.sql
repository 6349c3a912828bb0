-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- One ledger row per (installation, message): a message redelivered under another event id
-- registers once; also the delivery-anchor fallback's "is there a row?" lookup.
create unique index concurrently if not exists channel_typing_reaction_message
  on channel_typing_reaction (installation_id, source_message_id);
