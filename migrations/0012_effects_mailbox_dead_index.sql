-- migrate:no-transaction
-- Validates 0011's widened state check (a scan under a lock that lets writes continue), and
-- the retention index for dead messages, built concurrently (dead messages are rare: tiny).
alter table actor_mailbox validate constraint actor_mailbox_state_check;

create index concurrently if not exists actor_mailbox_dead on actor_mailbox (dead_at_ms)
  where state = 'dead';
