-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- The retirement fences' two indexes that no query needs, as 0117 did for the receipts (issue
-- 18's leftover): every retirement inserts into each index of the fences table.
-- - chat_retired_reaction_operations_created_idx (created_at) is a prefix of the retention key
--   (created_at, actor_id, operation_id) from 0060, which serves every created_at range the
--   same way: the retention probe and batches, and the legacy contract's drain count (its
--   `contract = 'legacy'` range has the partial legacy index).
-- - chat_retired_reaction_operations_ticket_expiry_idx (ticket_expires_at): no query filters or
--   orders by the column alone; retention reads it from the retention key's INCLUDE.
-- Dropped concurrently: live retirements keep going.
drop index concurrently if exists private.chat_retired_reaction_operations_created_idx;
drop index concurrently if exists private.chat_retired_reaction_operations_ticket_expiry_idx;
