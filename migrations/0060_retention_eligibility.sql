-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Retention cleanup (issue 8, docs/retention.md): stable cursor keys for eligibility scans.
--
-- 0020 already stamps created_at and ticket_expires_at from app_now() on both tables, so no
-- column is added (adding a stored column would rewrite two large tables). What deletion
-- lacks is an index whose order is a stable, unique key: (created_at, actor_id,
-- operation_id). A batch is then one bounded index range scan
--   created_at < cutoff and (created_at, actor_id, operation_id) > cursor
--   order by created_at, actor_id, operation_id limit 250
-- with ticket expiry and the drain grace checked on the rows the scan yields.
-- Built concurrently: live reaction writes keep going while the index builds.
create index concurrently if not exists chat_reaction_operations_retention_key_idx
  on private.chat_reaction_operations (created_at, actor_id, operation_id)
  include (ticket_expires_at, contract);

create index concurrently if not exists chat_retired_reaction_operations_retention_key_idx
  on private.chat_retired_reaction_operations (created_at, actor_id, operation_id)
  include (ticket_expires_at, contract);
