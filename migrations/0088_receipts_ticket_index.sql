-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Issue 15: deleting a ticket (ticket housekeeping, workers/housekeeping/tickets.ts) sets its
-- receipt's ticket_id to null through the foreign key of 0020 (`on delete set null`). The
-- referencing side had no index, so every deleted ticket ran the foreign-key update as a
-- sequential scan of all receipts: a 1,000-ticket batch was 1,000 scans of the table.
-- Partial: legacy receipts and receipts whose ticket is gone hold null and are never looked
-- up by ticket (`ticket_id = $1` implies not null, so the foreign-key query can use it).
-- Built concurrently: live reaction writes keep going while the index builds.
create index concurrently if not exists chat_reaction_operations_ticket_idx
  on private.chat_reaction_operations (ticket_id) where ticket_id is not null;
