-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Retention cleanup control in the database (issue 15, docs/retention.md "Stop and enable").
--
-- The RetentionCleanup Durable Object holds the enabled flag, the stop generation and the
-- cursor; this one row is the database's half of the first two, so that neither an enable
-- racing a stop nor a batch outliving the object's memory can delete after a stop:
--  - enable is a compare-and-set on `generation` (the value the operator read): a stop in
--    between moved it, so the enable fails and a new, explicit enable is needed;
--  - stop bumps `generation` and clears `enabled` with an UPDATE, which waits for every batch
--    transaction that holds this row FOR SHARE (each batch does, from its check to its
--    commit): when the stop commits, no batch can commit after it, and every later batch
--    reads the new generation and deletes nothing.
create table if not exists private.retention_control (
  id boolean primary key default true check (id),
  generation bigint not null default 0 check (generation >= 0),
  enabled boolean not null default false,
  changed_at timestamptz not null default app_now()
);

insert into private.retention_control (id) values (true) on conflict (id) do nothing;

-- Every enable, stop and rollback of the cleanup (issue 15, docs/retention.md "Activation and
-- rollback"): who (the operator named in the request, and which credential allowed it), when
-- (database time) and the generation it left. Written in the same transaction as the control
-- row's change, so a row exists exactly when the change committed. Retention rule
-- (docs/retention-rules.md): rows older than 400 days are deleted by the next recorded action,
-- at most 100 at a time; actions are rare operator requests, so the table stays small.
create table if not exists private.retention_activations (
  id bigint generated always as identity primary key,
  action text not null check (action in ('enable', 'stop', 'rollback')),
  operator text not null check (length(operator) between 1 and 200),
  credential text not null check (credential in ('retention_admin', 'admin')),
  generation bigint not null check (generation >= 0),
  request_id text not null check (length(request_id) between 1 and 200),
  at timestamptz not null default app_now()
);

create index if not exists retention_activations_at_idx on private.retention_activations (at);
