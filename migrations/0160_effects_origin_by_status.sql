-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- concurrent builds run under the runner's session lock and statement timeouts (scripts/lib/migrator.ts); a session SET here would outlive this file
-- Issue 35: one index of effects by origin instance instead of two.
--
-- 0140's `effects_processing_origin` (the pumps' reads of their own processing effects) and
-- 0150's `effects_origin` (instance retention's ID-ordered delete and the foreign key's lookup)
-- each took an entry on every claim and every completion: no update of `effects` is HOT
-- (`status` is in the partial indexes' predicates), so each update inserts into every index
-- whose predicate the new row meets. The effects drain lost about 40% of its rate to them
-- (bench/probes/effects-vs-graphile.ts: 11.5k-15.5k effects/s with both, 19k-21.5k without,
-- graphile-worker 15k-23k in the same runs). (origin_instance_id, status, id) serves all three:
-- the pumps read one instance's `processing` range, the retention's delete reads the instance's
-- prefix (and sorts its few rows by id), the foreign key looks up the leading column.
create index concurrently if not exists effects_origin_status
  on effects (origin_instance_id, status, id);

drop index concurrently if exists effects_processing_origin;

drop index concurrently if exists effects_origin;
