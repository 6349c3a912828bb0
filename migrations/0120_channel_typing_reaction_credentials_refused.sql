-- Issue 28 hole 5: the classification a rotation relies on gets its own column instead of being
-- read back from the free-text last_error, which the retry pass overwrites with notes such as
-- `deferred:429` (nothing sent for the row) and so erased "Lark refused these credentials".
--   credentials_refused  a withdrawal of the row was refused for the app's credentials
--                        themselves (10014/10015 from the token endpoint, with the snapshot
--                        and, where tried, the current secret) since the last rotation. Only
--                        ever set by a withdrawal's outcome (a deferral, a held route or another
--                        failure leaves it); rotateInstallation makes such rows due at once and
--                        clears it for them (installations/store.ts).
-- A constant default on a new column is a catalog-only change (no table rewrite). The backfill
-- touches only live rows whose last note still carries the code.
-- Bounded: the add-column waits at most 5 s for its ACCESS EXCLUSIVE lock (live traffic keeps
-- running; the runner retries a failed file), and the backfill of live rows is short.
set local lock_timeout = '5s';
set local statement_timeout = '60s';

alter table channel_typing_reaction
  add column if not exists credentials_refused boolean not null default false;

update channel_typing_reaction
   set credentials_refused = true
 where cleaned_at is null and abandoned_at is null
   and not credentials_refused
   and last_error ~ ':(10014|10015)$';
