-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- concurrent builds run under the runner's session lock and statement timeouts (scripts/lib/migrator.ts); a session SET here would outlive this file
-- Issue 33 items 4 and 5: dead letters in bulk by installation and death time
-- (workers/effects/dead-letters-bulk.ts). A page walks the installation's conversations
-- (channel_conversations_installation, 0201) and reads each one's dead messages in the range;
-- without this it read every mailbox row of every conversation through the
-- (instance_id, message_key) key, delivered ones included (kept a day), on every page. Only
-- dead rows are in it, and they are rare: small, and the rows that enter it (a message going
-- dead) already enter actor_mailbox_dead.
create index concurrently if not exists actor_mailbox_dead_instance
  on actor_mailbox (instance_id, dead_at_ms, id) where state = 'dead';
