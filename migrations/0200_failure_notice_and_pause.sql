-- squawk-ignore-file prefer-bigint-over-int -- turn_no matches channel_turns (integer)
-- Issue 33 item 1: two per-installation settings, and the record of each failure notice.
--
-- lark_installation_settings.failure_notice: what a user sees when a turn fails (`none`,
-- `reaction`: an emoji on the turn's newest input, `reply`: a short localized reply).
-- lark_installation_settings.paused: `on` while an operator holds the installation (inputs
-- are recorded, no turn starts, no badge is added). Changed only through the pause and resume
-- routes, which serialize against every turn start (workers/installations/pause.ts).
--
-- channel_failure_notices: one row per failed turn whose notice was decided, written before
-- anything is sent to Lark, so a crashed notice is finished with the same kind, the same
-- uuid (a reply) or found again by listing (a reaction: Lark's create is not idempotent).
-- `add_attempts` counts reaction creates sent; `posted_at` is set once Lark answered. Rows go
-- with their turn (cascade from channel_turns' retention, docs/retention-rules.md).
--
-- Additive: two text columns with constant defaults (catalog-only since PostgreSQL 11; their
-- checks scan a table of one row per configured installation) and a new table; older code
-- neither reads nor writes them.
set local lock_timeout = '5s';
set local statement_timeout = '60s';

alter table lark_installation_settings
  add column if not exists failure_notice text not null default 'none'
    check (failure_notice in ('none', 'reaction', 'reply')),
  add column if not exists paused text not null default 'off' check (paused in ('off', 'on'));

create table if not exists channel_failure_notices (
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
