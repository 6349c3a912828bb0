-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- run under the runner's session lock and statement timeouts (scripts/lib/migrator.ts); a session SET here would outlive this file
-- squawk-ignore-file prefer-robust-stmts -- the validate repeats harmlessly: validating a valid constraint is a no-op; the add above is guarded
-- Issue 35 (the drain's rate against graphile-worker): effect pruning reads the primary key in
-- ID order (workers/effects/recovery.ts PRUNE_EFFECTS_SQL), bounded by the staging time every
-- UUIDv7 ID carries (workers/effects/ids.ts), so no index follows finished_at_ms any more. Each
-- batch completion inserted 100 entries into effects_finished, four workers into the same
-- rightmost leaf: without it the 4-worker drain went from ~29k to ~31k effects/s, steadier
-- (docs/benchmarks.md). The previous release's prune (v1.0.0) keeps working without it: its
-- statement is unchanged and correct, read by a scan of effects bounded by its retention budget
-- (5 s, logged as effect_retention_failed if it runs out), only while that release still runs.
--
-- effects_id_v7: the prune's bound is sound only if every ID is a UUIDv7 (a v4 ID's leading
-- bits are random, and one above the bound would never be pruned). Every release wrote
-- newEffectId's v7 IDs; the check makes it a rule of the table. Added NOT VALID (a brief
-- lock, no scan), then validated without blocking writes. The add is one line (the runner splits
-- a no-transaction file at line-ending semicolons) and skipped when a run interrupted after it
-- is repeated.
drop index concurrently if exists effects_finished;
do $$ begin if not exists (select from pg_constraint where conrelid = 'effects'::regclass and conname = 'effects_id_v7') then alter table effects add constraint effects_id_v7 check (substr(id::text, 15, 1) = '7') not valid; end if; end $$;
alter table effects validate constraint effects_id_v7;
