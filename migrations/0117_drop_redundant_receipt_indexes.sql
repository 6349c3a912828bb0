-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Two indexes of the operation receipts that no query needs (issue 18; plans in
-- docs/mobile-api.md, bench/probes/receipt-index-plans.ts). Every ticket write inserts into
-- each index of the receipts table under the message lock, so an index without a reader is
-- pure cost on the hottest write path:
-- - chat_reaction_operations_created_idx (created_at) is a prefix of the retention key
--   (created_at, actor_id, operation_id) from 0060, which serves every created_at range the
--   same way (retention probe and batches, the console's 24 h trend); with it gone the
--   retention batch runs on the key it orders by (11.4 -> 7.8 ms at 200,000 receipts).
-- - chat_reaction_operations_ticket_expiry_idx (ticket_expires_at): no query filters or
--   orders by the column alone; retention reads it from the retention key's INCLUDE.
-- Dropped concurrently: live reaction writes keep going.
drop index concurrently if exists private.chat_reaction_operations_created_idx;
drop index concurrently if exists private.chat_reaction_operations_ticket_expiry_idx;
