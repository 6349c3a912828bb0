-- squawk-ignore-file prefer-bigint-over-int -- turn numbers, input counts, generations, sequences and attempts per conversation, not ids
-- squawk-ignore-file require-concurrent-index-creation -- every index is on a table this file creates: empty, in this transaction
-- Baseline of the channel engine (issue 32 item 4; the squashed series was 0050, 0180, 0185,
-- 0186, 0200's notices, 0201): conversations, turns, streamed reply cards and failure
-- notices (docs/channel.md). Inputs are lark_inbound_messages (0030), placed in their session.
set local lock_timeout = '5s';
set local statement_timeout = '30s';

-- One row per conversation (installation, chat, thread); its id is the conversation actor's
-- instance id (the "session"). The webhook's accept statement bumps last_position to number the
-- input it records, so positions are strictly increasing per session (a message id seen twice
-- leaves a harmless gap). context_revision is the conversation context generation that inputs
-- and turns carry; turns settle inputs only within their revision. No foreign keys: a
-- conversation and its inputs outlive a deleted installation (the ledger still needs them).
create table channel_conversations (
  id text primary key,
  installation_id text not null,
  workspace_id text not null,
  app_id text not null,
  chat_id text not null,
  thread_id text,
  last_position bigint not null default 0,
  context_revision bigint not null default 1,
  created_at timestamptz not null default app_now(),
  updated_at timestamptz not null default app_now()
);
-- A resume (workers/channel/pause.ts) finds the installation's conversations with a backlog in
-- pages ordered by id.
create index channel_conversations_installation on channel_conversations (installation_id, id);

-- One row per turn, written by the conversation actor's fenced commits: at the flush (cutoff
-- and context revision recorded before any detached work) and in the terminal transaction
-- (outcome). delivery_key is the reply's Lark `uuid`, derived from the first generation's
-- effect id and kept across replacement generations. reply_mode is the mode the turn's first
-- run chose: every later generation answers in it (Lark's uuid dedup would otherwise hand back
-- an earlier message of the other mode; chaos/replays/reply-mode-switch.json).
create table channel_turns (
  session_id text not null,
  turn_no integer not null,
  context_revision bigint not null,
  first_position bigint not null,
  cutoff_position bigint not null,
  input_count integer not null,
  anchor_message_id text not null,
  delivery_key text not null,
  generation integer not null default 1,
  effect_id uuid not null,
  outcome text check (outcome in ('delivered', 'failed', 'retired', 'anchor_gone')),
  reply_message_id text,
  started_at timestamptz not null default app_now(),
  settled_at timestamptz,
  reply_mode text check (reply_mode in ('text', 'card_stream')),
  primary key (session_id, turn_no),
  check (first_position <= cutoff_position),
  check ((outcome is null) = (settled_at is null))
);

-- The CardKit card entity of one turn's streamed reply, recorded before it is sent (a card
-- created but not recorded is an orphan Lark never shows: it can be sent only by its id).
-- `sequence` is the highest CardKit sequence any writer of the card has reserved: writers
-- reserve blocks above it in one statement, so sequences strictly increase across every writer
-- of a card, a recovered one included (docs/channel.md "Streaming cards"). `sent_message_id` is
-- set once the reply carrying the card was answered; `finished_at` once the card was set to its
-- final text with streaming off; `locale` is the turn's language, so the minute sweep that
-- finishes a card left streaming writes its interrupted notice in it. Rows go with their turn.
create table channel_reply_cards (
  session_id text not null,
  turn_no integer not null,
  installation_id text not null,
  card_id text not null check (length(card_id) between 1 and 64),
  sequence integer not null default 0 check (sequence >= 0),
  sent_message_id text,
  finished_at timestamptz,
  created_at timestamptz not null default app_now(),
  locale text not null default 'en' check (locale in ('en', 'vi', 'zh')),
  primary key (session_id, turn_no),
  foreign key (session_id, turn_no) references channel_turns (session_id, turn_no) on delete cascade
);
-- The pacing reads the installation's cards still streaming (card-stream.ts).
create index channel_reply_cards_streaming
  on channel_reply_cards (installation_id) where finished_at is null;

-- One row per failed turn whose notice was decided, written before anything is sent to Lark,
-- so a crashed notice is finished with the same kind, the same uuid (a reply) or found again
-- by listing (a reaction: Lark's create is not idempotent). `add_attempts` counts reaction
-- creates sent; `posted_at` is set once Lark answered. Rows go with their turn.
create table channel_failure_notices (
  session_id text not null,
  turn_no integer not null,
  installation_id text not null,
  kind text not null check (kind in ('reaction', 'reply')),
  message_id text not null check (length(message_id) between 1 and 200),
  add_attempts integer not null default 0 check (add_attempts >= 0),
  reaction_id text,
  reply_message_id text,
  posted_at timestamptz,
  created_at timestamptz not null default app_now(),
  primary key (session_id, turn_no),
  foreign key (session_id, turn_no) references channel_turns (session_id, turn_no) on delete cascade
);
