-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- squawk-ignore-file prefer-robust-stmts -- VALIDATE CONSTRAINT is idempotent: a rerun after a failure validates again, and the build says if not exists
-- Validates 0011's widened state check (a scan under a lock that lets writes continue), and
-- the retention index for dead messages, built concurrently (dead messages are rare: tiny).
alter table actor_mailbox validate constraint actor_mailbox_state_check;

create index concurrently if not exists actor_mailbox_dead on actor_mailbox (dead_at_ms)
  where state = 'dead';
