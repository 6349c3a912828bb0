-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- concurrent builds run under the runner's session lock and statement timeouts (scripts/lib/migrator.ts); a session SET here would outlive this file
-- Issue 33 item 1: a resume (workers/channel/pause.ts) finds the installation's conversations
-- with a backlog in pages ordered by id; without this it read every conversation of every
-- installation.
create index concurrently if not exists channel_conversations_installation
  on channel_conversations (installation_id, id);
