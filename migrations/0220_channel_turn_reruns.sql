-- squawk-ignore-file prefer-bigint-over-int -- rerun_of is a turn number (channel_turns.turn_no is integer)
-- Issue 33 item 4: re-running a failed turn (workers/channel/rerun.ts, docs/operations.md
-- "Re-run a failed turn").
--
-- channel_turns.rerun_requested_at: set once, under the conversation's state-row lock, by the
-- request that re-ran this (failed) turn; a second request finds it and is refused
-- (`turn_already_rerun`), so one failed turn starts at most one re-run.
-- channel_turns.rerun_of: on the new turn, the number of the failed turn it re-runs (written
-- by the conversation actor's flush when the turn covers a re-run's inputs).
--
-- Additive: two nullable columns without defaults (catalog-only); older code neither reads
-- nor writes them (its insert names its columns).
set local lock_timeout = '5s';
set local statement_timeout = '60s';

alter table channel_turns
  add column if not exists rerun_requested_at timestamptz,
  add column if not exists rerun_of integer;
