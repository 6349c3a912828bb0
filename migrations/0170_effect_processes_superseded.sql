-- Issue 31 item 4: a restarted ActorHost tells its previous incarnation's process from itself.
--
-- The host keeps the id of the process it registered in its Durable Object storage until it
-- releases it; a new incarnation that finds one there marks it superseded here. Claims of that
-- process whose kind is idempotent by key (the Lark reply with its uuid, a badge withdrawal)
-- are then recovered at once instead of after EFFECT_STALE_AFTER_MS; every other claim keeps
-- the staleness rule (the platform does not promise the old incarnation has stopped).
-- Additive: a nullable column with no default is a catalog-only change, and older code
-- neither reads nor writes it.
-- Bounded like every transactional migration: a catalog-only change that waits at most 5 s
-- for the table's lock (claims hold row locks only, never the table's).
set local lock_timeout = '5s';
set local statement_timeout = '60s';
alter table effect_processes add column if not exists superseded_at_ms bigint;
