-- Issue 35 (the effects drain against graphile-worker, and every claim in production): the two
-- queue tables are vacuumed after a fixed number of dead row versions, not after a fifth of
-- the rows they keep.
--
-- A claim reads effects_pending from its front (`order by run_at_ms, id`), a drain reads
-- actor_mailbox_pending from the front of its instance's range, the minute poll reads
-- actor_mailbox_due from its front. Every claimed effect and every delivered message leaves its
-- old entry there, pointing at a dead version, until a vacuum removes it: each later read walks
-- over all of them first (measured after 60,000 claims: the claim's pick read 975 buffers in
-- 10.9 ms, 304 in 4.5 ms once the entries were marked dead, 7 in 0.5 ms after a vacuum;
-- docs/benchmarks.md). Autovacuum's default trigger is 50 + 20% of the table's rows, and both
-- tables keep a day of finished rows (docs/retention-rules.md), so the dead front grew all day.
--
-- autovacuum_vacuum_threshold / _insert_threshold 10000 with scale factors 0: a vacuum after
-- 10,000 dead (or inserted) row versions whatever the table's size, so a front holds at most
-- about the larger of 10,000 entries and a minute's claims (autovacuum visits a database once
-- per autovacuum_naptime, 1 min by default). vacuum_index_cleanup on: with few dead versions
-- on a large table (under 2% of its pages) vacuum otherwise skips the indexes, and the index
-- entries are exactly what the reads walk over. Each index of these tables is then scanned
-- once per such vacuum: read work in the background, against a pick that read the whole front
-- on every claim.
--
-- A storage parameter only: no rewrite, no scan. SHARE UPDATE EXCLUSIVE, which reads and
-- writes do not wait for (a running autovacuum of the table does: the lock_timeout bounds it).
-- The previous release reads and writes both tables exactly as before.
set local lock_timeout = '5s';
set local statement_timeout = '30s';

alter table effects set (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 10000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 10000,
  vacuum_index_cleanup = on
);

alter table actor_mailbox set (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 10000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 10000,
  vacuum_index_cleanup = on
);
