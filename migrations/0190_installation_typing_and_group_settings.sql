-- Issue 33 item 1: two per-installation settings, the app's daily Lark call count, the bot's
-- own open_id, and why an input is recorded but never answered.
--
-- lark_installation_settings (0180) gets three columns, each with the default an installation
-- nobody configured reads (workers/installations/settings.ts SETTINGS: one entry per column):
-- - typing_badge: `on` (the Typing badge on every input), `off` (never: no Add, no ledger row),
--   `quiet` (none while the app's reaction routes are held by a recorded 429, or while the
--   app is over typing_daily_call_budget today);
-- - reply_in_groups: `always`, or `mentioned` (a group message is answered only when it
--   @-mentions the bot's own open_id);
-- - typing_daily_call_budget: the operator's daily Lark call budget for `quiet`; null = none.
-- The webhook's accept statement reads them in its own snapshot (workers/channel/accept.ts).
--
-- lark_call_counts: the app's Lark calls per UTC day, one row per (API host, App ID, day),
-- incremented by the rate gate's admission of each call (workers/lark/rate-limits.ts, in
-- the statement that checks the route's hold). Deleted 7 days after its day by the minute
-- housekeeping (workers/housekeeping/lark-calls.ts, docs/retention-rules.md). No foreign key:
-- keyed like lark_rate_limits, by the app, not the installation.
--
-- lark_bot_identities: the bot's own open_id per installation (Open API
-- `GET /open-apis/bot/v3/info` → bot.open_id), fetched once and kept while the installation
-- exists (cascade). The App ID and host it was fetched for are stored: a row fetched for
-- another app or host is never read as this one's (workers/channel/mentions.ts).
--
-- lark_inbound_messages.unanswered: why a recorded input is never answered (`not_mentioned`),
-- null for every input handed to its conversation. Nullable, no default: catalog-only.
--
-- Additive: older code neither reads nor writes the new columns and tables.
set local lock_timeout = '5s';
set local statement_timeout = '60s';

alter table lark_installation_settings
  add column if not exists typing_badge text not null default 'on'
    check (typing_badge in ('on', 'off', 'quiet')),
  add column if not exists reply_in_groups text not null default 'always'
    check (reply_in_groups in ('always', 'mentioned')),
  add column if not exists typing_daily_call_budget bigint
    check (typing_daily_call_budget between 1 and 1000000000);

create table if not exists lark_call_counts (
  api_base text not null,
  app_id text not null,
  day date not null,
  calls bigint not null default 0 check (calls >= 0),
  primary key (api_base, app_id, day)
);

-- The housekeeping's pick, oldest day first.
create index if not exists lark_call_counts_day on lark_call_counts (day);

create table if not exists lark_bot_identities (
  installation_id text primary key references lark_installations (id) on delete cascade,
  api_base text not null,
  app_id text not null,
  open_id text not null check (length(open_id) between 1 and 128),
  fetched_at timestamptz not null default app_now()
);

-- The check is added `not valid`: every existing row is null (the column is new), so a
-- validation would only scan the table under the lock; new and updated rows are checked.
alter table lark_inbound_messages add column if not exists unanswered text;
alter table lark_inbound_messages
  add constraint lark_inbound_messages_unanswered check (unanswered in ('not_mentioned')) not valid;
