-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Inputs of a session in order (turn settlement, inspection); unique as a position is.
create unique index concurrently if not exists lark_inbound_messages_session_position
  on lark_inbound_messages (session_id, position) where session_id is not null;
