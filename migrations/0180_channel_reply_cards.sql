-- squawk-ignore-file prefer-bigint-over-int -- turn_no matches channel_turns (integer); sequence must fit CardKit's int (1 … 2^31−1, reference §6)
-- Issue 34 item 2: streaming card replies.
--
-- lark_installation_settings: per-installation settings, one row an installation, read by the
-- reply executor at each run; a missing row means every default. Issue 33's settings join this
-- row as columns. Each change is recorded in console_audit with its operator (settings.ts).
--
-- channel_reply_cards: the CardKit card entity of one turn's streamed reply, recorded before it
-- is sent (a card created but not recorded is an orphan Lark never shows: it can be sent only by
-- its id). `sequence` is the highest CardKit sequence any writer of the card has reserved:
-- writers reserve blocks above it in one statement, so sequences strictly increase across every
-- writer of a card, a recovered one included (docs/channel.md "Streaming cards"). `sent_message_id`
-- is set once the reply carrying the card was answered; `finished_at` once the card was set to
-- its final text with streaming off. Rows go with their turn (cascade from channel_turns'
-- retention, docs/retention-rules.md).
--
-- Additive: two new tables; older code neither reads nor writes them.
set local lock_timeout = '5s';
set local statement_timeout = '60s';

create table if not exists lark_installation_settings (
  installation_id text primary key references lark_installations (id) on delete cascade,
  reply_mode text not null default 'text' check (reply_mode in ('text', 'card_stream')),
  updated_at timestamptz not null default app_now(),
  updated_by text not null check (length(updated_by) between 1 and 200)
);

create table if not exists channel_reply_cards (
  session_id text not null,
  turn_no integer not null,
  installation_id text not null,
  card_id text not null check (length(card_id) between 1 and 64),
  sequence integer not null default 0 check (sequence >= 0),
  sent_message_id text,
  finished_at timestamptz,
  created_at timestamptz not null default app_now(),
  primary key (session_id, turn_no),
  foreign key (session_id, turn_no) references channel_turns (session_id, turn_no) on delete cascade
);

-- The pacing reads the installation's cards still streaming (card-stream.ts).
create index if not exists channel_reply_cards_streaming
  on channel_reply_cards (installation_id) where finished_at is null;
