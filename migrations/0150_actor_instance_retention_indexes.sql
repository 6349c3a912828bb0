-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- concurrent builds run under the runner's session lock and statement timeouts (scripts/lib/migrator.ts); a session SET here would outlive this file
-- Issue 35 hole 9: retention of idle actor instances (workers/effects/instance-retention.ts).
--
-- The minute retention picks idle instances of the actor types that opted in, oldest commit
-- first, bounded by its batch: (actor_type, updated_at_ms) is that range scan.
create index concurrently if not exists actor_instances_idle
  on actor_instances (actor_type, updated_at_ms);

-- Every child of an instance by its instance: the retention's idle checks and its explicit,
-- ID-ordered delete of the instance's effects, and the foreign key's own lookup when the
-- instance row goes (without these, each deleted instance read the whole effects and checks
-- tables, once per foreign key). effect_recoveries (effect_recoveries_origin) and
-- actor_mailbox (its unique key) have one already.
create index concurrently if not exists effects_origin
  on effects (origin_instance_id, id);
create index concurrently if not exists effect_recovery_checks_origin
  on effect_recovery_checks (origin_instance_id, id);
