-- squawk-ignore-file prefer-bigint-over-int -- versions, attempts and attempt limits (bounded by checks), not ids
-- squawk-ignore-file prefer-identity -- its ids are bigserial (64-bit), as the series this replaces had them
-- squawk-ignore-file require-concurrent-index-creation -- every index is on a table this file creates: empty, in this transaction
-- Baseline of the effect runtime (issue 32 item 4; the squashed series was 0010–0013, 0112,
-- 0140, 0150, 0160, 0170): durable actors, their mailbox, effects, the processes that run them,
-- recovery bindings and checks. See docs/effects.md. Times are bigint epoch milliseconds from
-- app_now_ms(). The write-back functions are repeatable: migrations/functions/effects_write_back.sql.
set local lock_timeout = '5s';
set local statement_timeout = '30s';

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
create index actor_instances_timer on actor_instances (wake_at_ms) where wake_at_ms is not null;
-- The minute retention of idle instances (workers/effects/instance-retention.ts) picks the
-- opted-in actor types' idle instances, oldest commit first, bounded by its batch.
create index actor_instances_idle on actor_instances (actor_type, updated_at_ms);

create table actor_mailbox (
  id bigserial primary key,
  instance_id text not null references actor_instances (id) on delete cascade,
  -- Idempotency key per instance; keys starting 'effect:' are written only by the runtime.
  message_key text not null,
  payload jsonb not null default 'null'::jsonb,
  available_at_ms bigint not null default app_now_ms(),
  -- dead: a poison message whose handler kept throwing, after its last attempt (terminal,
  -- never redelivered, pruned like delivered ones), so it no longer blocks its mailbox.
  state text not null default 'pending' check (state in ('pending', 'delivered', 'dead')),
  delivered_at_ms bigint,
  created_at_ms bigint not null default app_now_ms(),
  -- Failed deliveries, and the handler's error text, truncated; never the payload.
  attempts int not null default 0,
  last_error text,
  dead_at_ms bigint,
  unique (instance_id, message_key)
);
create index actor_mailbox_pending on actor_mailbox (instance_id, id) where state = 'pending';
create index actor_mailbox_delivered on actor_mailbox (delivered_at_ms) where state = 'delivered';
create index actor_mailbox_dead on actor_mailbox (dead_at_ms) where state = 'dead';
-- The minute poll reads due messages in due-time order, bounded by its limit: a backlog on low
-- instance ids never hides a high-id instance's lost wake, and not-yet-due delayed messages are
-- never read (workers/effects/mailbox.ts).
create index actor_mailbox_due on actor_mailbox (available_at_ms, id) where state = 'pending';

create table effect_processes (
  id bigserial primary key,
  role text not null,
  protocol_version int not null,
  heartbeat_at_ms bigint not null default app_now_ms(),
  started_at_ms bigint not null default app_now_ms(),
  stopped_at_ms bigint,
  -- Set by a restarted ActorHost on its previous incarnation's process: claims of it whose kind
  -- is idempotent by key are recovered at once; every other claim keeps the staleness rule
  -- (the platform does not promise the old incarnation has stopped; docs/effects.md).
  superseded_at_ms bigint
);

-- fillfactor 50: effects rows are updated twice after their insert (claim, then completion or
-- failure), and neither update can be HOT (`status` is in the partial indexes' predicates).
-- With room on the page the new version stays beside the old one: no extra heap lock record,
-- and the update record logs only the changed middle of the tuple (measured on PostgreSQL 15
-- with pg_waldump of a 20k drain: 21.7 → 18.8 MB of WAL; docs/effects.md).
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
) with (fillfactor = 50);
create index effects_pending on effects (run_at_ms, id) where status = 'pending';
create index effects_pending_origin on effects (origin_instance_id, run_at_ms) where status = 'pending';
-- The recovery pass reads only this partial index: its size is the work in flight, not the table.
create index effects_processing on effects (locked_by, id) where status = 'processing';
create index effects_finished on effects (finished_at_ms) where status in ('completed', 'dead');
-- One index by origin instance serves the pumps' reads of their own processing effects, the
-- instance retention's ID-ordered delete and the foreign key's lookup (two separate ones cost
-- the drain about 40% of its rate: each claim and completion inserts into every index).
create index effects_origin_status on effects (origin_instance_id, status, id);

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
create index effect_recovery_checks_origin on effect_recovery_checks (origin_instance_id, id);

-- A recovery binding must outlive its effect (effect-recovery.md: "polling revisits stopped
-- owners until each effect's own grace expires"). A binding's lifetime, expires_at_ms -
-- created_at_ms, is counted from the later of its emit and its effect's end: while the effect
-- is pending or processing the binding always lives, and after the effect is retired or
-- finished it lives one more lifetime, so a check can still report the outcome. Both the
-- pruning and the check admission ask this one function. Versioned, not repeatable: its
-- argument is a row type of this file's table.
create function effect_binding_live(r effect_recoveries, now_ms bigint) returns boolean
language sql stable parallel safe as $$
  select r.expires_at_ms >= now_ms
      -- coalesce: a never-retired binding must read false here, not null (`not null` is null).
      or coalesce(r.retired_at_ms + (r.expires_at_ms - r.created_at_ms) >= now_ms, false)
      or exists (
           select 1 from effects e
            where e.id = r.effect_id
              and (e.status in ('pending', 'processing')
                   or coalesce(e.finished_at_ms + (r.expires_at_ms - r.created_at_ms) >= now_ms, false)))
$$;
