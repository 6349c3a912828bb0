-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- squawk-ignore-file prefer-bigint-over-int -- versions, attempts and attempt limits (bounded by checks), not ids
-- squawk-ignore-file prefer-identity -- its ids are bigserial (64-bit), applied before the migration linter: an identity column would change nothing here
-- Durable actors, their mailbox, effects, the processes that run them and recovery bindings.
-- See docs/effects.md. Times are bigint epoch milliseconds from app_now_ms().

create table actor_instances (
  id text primary key,
  actor_type text not null,
  actor_key text not null,
  state jsonb not null default '{}'::jsonb,
  -- The commit fence: a fenced commit updates only when revision still equals what it read.
  revision bigint not null default 0,
  -- Timer asked for by the actor (debounce); the host delivers a timer event at or after it.
  wake_at_ms bigint,
  created_at_ms bigint not null default app_now_ms(),
  updated_at_ms bigint not null default app_now_ms(),
  unique (actor_type, actor_key)
);

create table actor_mailbox (
  id bigserial primary key,
  instance_id text not null references actor_instances (id) on delete cascade,
  -- Idempotency key per instance; keys starting 'effect:' are written only by the runtime.
  message_key text not null,
  payload jsonb not null default 'null'::jsonb,
  available_at_ms bigint not null default app_now_ms(),
  state text not null default 'pending' check (state in ('pending', 'delivered')),
  delivered_at_ms bigint,
  created_at_ms bigint not null default app_now_ms(),
  unique (instance_id, message_key)
);
create index actor_mailbox_pending on actor_mailbox (instance_id, id) where state = 'pending';
create index actor_mailbox_delivered on actor_mailbox (delivered_at_ms) where state = 'delivered';

create table effect_processes (
  id bigserial primary key,
  role text not null,
  protocol_version int not null,
  heartbeat_at_ms bigint not null default app_now_ms(),
  started_at_ms bigint not null default app_now_ms(),
  stopped_at_ms bigint
);

create table effects (
  -- Allocated by the emitter at staging (time-ordered UUID), so a handle exists before commit.
  id uuid primary key,
  origin_instance_id text not null references actor_instances (id) on delete cascade,
  kind text not null,
  args jsonb not null default 'null'::jsonb,
  status text not null default 'pending'
    check (status in ('pending', 'processing', 'completed', 'dead')),
  -- Owner process; deliberately no foreign key: a missing owner is a stale owner.
  locked_by bigint,
  locked_at_ms bigint,
  attempts int not null default 0,
  max_attempts int not null default 5 check (max_attempts between 1 and 100),
  run_at_ms bigint not null default app_now_ms(),
  notify_on_complete boolean not null default false,
  result jsonb,
  last_error text,
  created_at_ms bigint not null default app_now_ms(),
  finished_at_ms bigint,
  check ((status = 'processing') = (locked_by is not null))
);
create index effects_pending on effects (run_at_ms, id) where status = 'pending';
create index effects_pending_origin on effects (origin_instance_id, run_at_ms) where status = 'pending';
-- The recovery pass reads only this partial index: its size is the work in flight, not the table.
create index effects_processing on effects (locked_by, id) where status = 'processing';
create index effects_finished on effects (finished_at_ms) where status in ('completed', 'dead');

-- Recovery/status bindings. No foreign key to effects: a binding outlives effect pruning
-- and message pruning, and goes away with its origin instance or at expires_at_ms.
create table effect_recoveries (
  effect_id uuid primary key,
  origin_instance_id text not null references actor_instances (id) on delete cascade,
  -- Null for a status-only binding, which never opts the effect into retirement.
  recovery_operation text,
  status_operation text,
  -- Per-effect grace; the effective timeout is greatest(runtime threshold, timeout_ms).
  timeout_ms bigint check (timeout_ms is null or timeout_ms between 1 and 604800000),
  retired_at_ms bigint,
  created_at_ms bigint not null default app_now_ms(),
  expires_at_ms bigint not null,
  check (recovery_operation is not null or status_operation is not null)
);
create index actor_instances_timer on actor_instances (wake_at_ms) where wake_at_ms is not null;
create index effect_recoveries_origin on effect_recoveries (origin_instance_id);
create index effect_recoveries_expiry on effect_recoveries (expires_at_ms);

-- Explicit recovery checks staged by requestEffectRecovery on the caller's transaction.
-- The id is internal: applications never supply it; it names the response message.
create table effect_recovery_checks (
  id bigserial primary key,
  effect_id uuid not null,
  origin_instance_id text not null references actor_instances (id) on delete cascade,
  requested_at_ms bigint not null default app_now_ms(),
  outcome text,
  resolved_at_ms bigint
);
create index effect_recovery_checks_open on effect_recovery_checks (origin_instance_id, effect_id)
  where outcome is null;
