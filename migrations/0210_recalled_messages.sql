-- squawk-ignore-file prefer-bigint-over-int -- turn_no matches channel_turns (integer)
-- Issue 33 item 2: recalled messages (`im.message.recalled_v1`).
--
-- channel_recalled_messages: one row per (installation, Lark message id) a user recalled, the
-- one record of "this input is recalled" that every decision reads (the webhook's accept
-- statement, the Add's revalidation, the reply's post claim, a delivered turn's deletion).
-- Keyed by the message, not by an input: a recall may arrive before its message (Lark gives
-- no order between events), and the message then finds the row and is never answered.
-- Pruned by housekeeping once old and no input of that message is left (docs/retention-rules.md).
--
-- channel_turns.reply_claimed_at: set by the reply run that decided to post (reply-claim.ts),
-- under the turn row's lock, after checking that not every input is recalled; later runs of the
-- turn (same uuid) post whatever is recalled since. Outcome `recalled`: every input of the turn
-- was recalled before its reply was claimed.
--
-- lark_installation_settings.recall_reply: `on` deletes a delivered reply once every input
-- of its turn is recalled; `off` (default) leaves it.
--
-- channel_reply_deletions: one row per reply the service decided to delete, written before
-- the delete is sent, so a crashed run finishes it (Lark's delete is idempotent: a message
-- already gone answers an already-gone code, recorded as such). Rows go with their turn.
--
-- Additive: a text column with a constant default, a nullable column, a new check `not valid`
-- (every existing row satisfies it; new and updated rows are checked), two new tables.
set local lock_timeout = '5s';
set local statement_timeout = '60s';

create table if not exists channel_recalled_messages (
  installation_id text not null,
  message_id text not null check (length(message_id) between 1 and 128),
  chat_id text check (length(chat_id) between 1 and 128),
  event_id text not null check (length(event_id) between 1 and 128),
  recall_type text check (length(recall_type) between 1 and 64),
  recall_time_ms bigint,
  recorded_at timestamptz not null default app_now(),
  primary key (installation_id, message_id)
);
create index if not exists channel_recalled_messages_recorded
  on channel_recalled_messages (recorded_at);

alter table lark_installation_settings
  add column if not exists recall_reply text not null default 'off'
    check (recall_reply in ('off', 'on'));

alter table channel_turns add column if not exists reply_claimed_at timestamptz;
alter table channel_turns drop constraint if exists channel_turns_outcome_check;
alter table channel_turns
  add constraint channel_turns_outcome_check
    check (outcome in ('delivered', 'failed', 'retired', 'anchor_gone', 'recalled')) not valid;

alter table lark_inbound_messages drop constraint if exists lark_inbound_messages_unanswered;
alter table lark_inbound_messages
  add constraint lark_inbound_messages_unanswered
    check (unanswered in ('not_mentioned', 'recalled')) not valid;

create table if not exists channel_reply_deletions (
  session_id text not null,
  turn_no integer not null,
  installation_id text not null,
  reply_message_id text not null check (length(reply_message_id) between 1 and 200),
  attempts integer not null default 0 check (attempts >= 0),
  outcome text check (outcome in ('deleted', 'already_gone', 'refused')),
  lark_code integer,
  created_at timestamptz not null default app_now(),
  finished_at timestamptz,
  primary key (session_id, turn_no),
  foreign key (session_id, turn_no) references channel_turns (session_id, turn_no) on delete cascade,
  check ((outcome is null) = (finished_at is null))
);
