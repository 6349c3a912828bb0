-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- squawk-ignore-file prefer-bigint-over-int -- turn numbers, input counts and generations per conversation, not ids
-- The channel engine (docs/channel.md). One row per conversation (installation, chat,
-- thread); its id is the conversation actor's instance id (the "session"). The webhook's
-- transaction bumps last_position to number the input it records, so positions are
-- strictly increasing per session (a message id seen twice leaves a harmless gap).
-- context_revision is the conversation context generation that inputs and turns carry;
-- turns settle inputs only within their revision. No foreign keys: a conversation and its
-- inputs outlive a deleted installation (the ledger still needs them).
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

-- Inputs stay in lark_inbound_messages (migration 0031), now placed in their session.
alter table lark_inbound_messages
  add column session_id text,
  add column position bigint,
  add column context_revision bigint,
  add column message_created_at_ms bigint;

-- One row per turn, written by the conversation actor's fenced commits: at the flush
-- (cutoff and context revision recorded before any detached work) and in the terminal
-- transaction (outcome). delivery_key is the reply's Lark `uuid`, derived from the first
-- generation's effect id and kept across replacement generations.
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
  primary key (session_id, turn_no),
  check (first_position <= cutoff_position),
  check ((outcome is null) = (settled_at is null))
);
