-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- concurrent builds run under the runner's session lock and statement timeouts (scripts/lib/migrator.ts); a session SET here would outlive this file
-- Issue 33 item 4: the conversation inspector searches within one installation
-- (workers/channel/inspect.ts FIND_SQL). By message id it probes the inputs' unique
-- (installation_id, message_id) and needs nothing here; by chat id and by sender it read every
-- conversation, and every input, of the database. Each of these costs every webhook input one
-- index entry: the input's own row, and the conversation row's per-input update (not HOT:
-- updated_at is indexed, 0080). The sender's key ends with id: the search reads a sender's
-- newest inputs only, a backward range. Narrow keys, no included columns; pinned by
-- test/node/channel/inspect.plans.test.ts.
create index concurrently if not exists channel_conversations_installation_chat
  on channel_conversations (installation_id, chat_id);
create index concurrently if not exists lark_inbound_messages_installation_sender
  on lark_inbound_messages (installation_id, sender_open_id, id) where session_id is not null;
