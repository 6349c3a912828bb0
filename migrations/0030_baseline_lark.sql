-- squawk-ignore-file prefer-bigint-over-int -- a credential version counter, not an id
-- squawk-ignore-file prefer-identity -- the inputs' id is bigserial (64-bit), as the series this replaces had it
-- squawk-ignore-file require-concurrent-index-creation -- every index is on a table this file creates: empty, in this transaction
-- Baseline of the Lark side (issue 32 item 4; the squashed series was 0030, 0031, 0050's and
-- 0190's input columns, 0051, 0081, 0083, 0180's, 0190's and 0200's settings): installations,
-- their settings, webhook receipts, inbound messages, the app's rate-limit holds and daily
-- call counts, and the bot's own identity. No foreign keys but the settings' and identities'
-- cascade with their installation: receipts and inputs outlive a deleted installation until
-- they are pruned (docs/retention-rules.md).
set local lock_timeout = '5s';
set local statement_timeout = '30s';

-- One self-built app in one workspace. Secrets are sealed with workers/crypto/sealed.ts,
-- bound to `lark_installation:<id>:<field>`, so a ciphertext copied onto another row or field
-- does not open.
create table lark_installations (
  id text primary key,
  workspace_id text not null,
  app_id text not null,
  api_base text not null,
  app_secret_sealed text not null,
  verification_token_sealed text not null,
  encrypt_key_sealed text,
  credential_version integer not null default 1,
  created_at timestamptz not null default app_now(),
  updated_at timestamptz not null default app_now()
);
-- One Lark app, one installation: a self-built app lives in exactly one tenant, so the same
-- app_id under two installations is always a mistake (a signed delivery for one could be
-- replayed to the other). The key is app_id alone: api_base is operator input, another
-- spelling of a host must not let the same app in again (docs/lark.md).
create unique index lark_installations_app on lark_installations (app_id);

-- Per-installation settings (workers/installations/settings.ts SETTINGS: one entry per
-- column), one row an installation; a missing row means every default. Read by the webhook's
-- accept statement in its own snapshot and by the reply executor at each run. Each change is
-- recorded in console_audit with its operator.
-- - reply_mode: `text`, or `card_stream` (a CardKit card streamed as the agent writes);
-- - typing_badge: `on`, `off` (no Add, no ledger row), `quiet` (none while the app's reaction
--   routes are held by a recorded 429, or while the app is over typing_daily_call_budget);
-- - reply_in_groups: `always`, or `mentioned` (a group message is answered only when it
--   @-mentions the bot's own open_id);
-- - typing_daily_call_budget: the operator's daily Lark call budget for `quiet`; null = none;
-- - failure_notice: what a user sees when a turn fails (`none`, `reaction`, `reply`);
-- - paused: `on` while an operator holds the installation; changed only through the pause and
--   resume routes, which serialize against every turn start (workers/channel/pause.ts).
create table lark_installation_settings (
  installation_id text primary key references lark_installations (id) on delete cascade,
  reply_mode text not null default 'text' check (reply_mode in ('text', 'card_stream')),
  updated_at timestamptz not null default app_now(),
  updated_by text not null check (length(updated_by) between 1 and 200),
  typing_badge text not null default 'on' check (typing_badge in ('on', 'off', 'quiet')),
  reply_in_groups text not null default 'always' check (reply_in_groups in ('always', 'mentioned')),
  typing_daily_call_budget bigint check (typing_daily_call_budget between 1 and 1000000000),
  failure_notice text not null default 'none' check (failure_notice in ('none', 'reaction', 'reply')),
  paused text not null default 'off' check (paused in ('off', 'on'))
);

-- The bot's own open_id per installation (`GET /open-apis/bot/v3/info` → bot.open_id), fetched
-- once and kept while the installation exists. The App ID and host it was fetched for are
-- stored: a row fetched for another app or host is never read as this one's
-- (workers/channel/mentions.ts).
create table lark_bot_identities (
  installation_id text primary key references lark_installations (id) on delete cascade,
  api_base text not null,
  app_id text not null,
  open_id text not null check (length(open_id) between 1 and 128),
  fetched_at timestamptz not null default app_now()
);

-- Webhook dedup: one row per delivered event_id. Lark retries for about 7.1 hours (15 s,
-- 5 min, 1 h, 6 h); rows are kept 24 hours (pruneEventReceipts). A verified delivery whose
-- content Postgres cannot store (U+0000, a lone surrogate) is acknowledged, so Lark stops
-- redelivering it, and its receipt says `rejected`.
create table lark_event_receipts (
  installation_id text not null,
  event_id text not null,
  event_type text not null,
  received_at timestamptz not null default app_now(),
  status text not null default 'accepted' check (status in ('accepted', 'rejected')),
  primary key (installation_id, event_id)
);
create index lark_event_receipts_received_at on lark_event_receipts (received_at);

-- Inbound user messages accepted by the webhook (workers/channel/accept.ts);
-- (installation, message) is unique, so a message delivered under two event ids is still one
-- input. Each is placed in its session (the conversation, channel_conversations) at a
-- position, strictly increasing per session, within a context revision. `unanswered` says why
-- a recorded input is never answered (`not_mentioned`); null for every input handed to its
-- conversation.
create table lark_inbound_messages (
  id bigserial primary key,
  installation_id text not null,
  event_id text not null,
  message_id text not null,
  chat_id text not null,
  thread_id text,
  root_id text,
  chat_type text not null,
  sender_open_id text,
  message_type text not null,
  content text not null,
  received_at_ms bigint not null,
  created_at timestamptz not null default app_now(),
  session_id text,
  position bigint,
  context_revision bigint,
  message_created_at_ms bigint,
  unanswered text,
  unique (installation_id, message_id),
  constraint lark_inbound_messages_unanswered check (unanswered in ('not_mentioned'))
);
-- Inputs of a session in order (turn settlement, inspection); unique as a position is.
create unique index lark_inbound_messages_session_position
  on lark_inbound_messages (session_id, position) where session_id is not null;

-- Lark's rate-limit resets (x-ogw-ratelimit-reset on a 429), one row per (API host, App ID,
-- route), so every isolate honours a reset another one received (workers/lark/rate-limits.ts).
-- A row whose not_before has passed holds nothing and is deleted by the typing maintenance
-- prune pass. Bounded by apps x routes.
create table lark_rate_limits (
  api_base text not null,
  app_id text not null,
  route text not null,
  not_before timestamptz not null,
  updated_at timestamptz not null default app_now(),
  primary key (api_base, app_id, route)
);
create index lark_rate_limits_not_before on lark_rate_limits (not_before);

-- The app's Lark calls per UTC day, incremented by the rate gate's admission of each call (in
-- the statement that checks the route's hold). Deleted 7 days after its day by the minute
-- housekeeping (workers/housekeeping/lark-calls.ts), oldest day first.
create table lark_call_counts (
  api_base text not null,
  app_id text not null,
  day date not null,
  calls bigint not null default 0 check (calls >= 0),
  primary key (api_base, app_id, day)
);
create index lark_call_counts_day on lark_call_counts (day);
