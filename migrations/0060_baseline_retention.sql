-- squawk-ignore-file require-concurrent-index-creation -- the index is on a table this file creates: empty, in this transaction
-- Baseline of the receipt and fence retention cleanup (issue 32 item 4; the squashed series was
-- 0087 and 0138; its cursor indexes are on the tables, 0020): the control row, the activation
-- record and the cleanup's own database role.
set local lock_timeout = '5s';
set local statement_timeout = '30s';

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
create table private.retention_control (
  id boolean primary key default true check (id),
  generation bigint not null default 0 check (generation >= 0),
  enabled boolean not null default false,
  changed_at timestamptz not null default app_now()
);

insert into private.retention_control (id) values (true);

-- Every enable, stop and rollback of the cleanup (issue 15, docs/retention.md "Activation and
-- rollback"): who (the operator named in the request, and which credential allowed it), when
-- (database time) and the generation it left. Written in the same transaction as the control
-- row's change, so a row exists exactly when the change committed. Retention rule
-- (docs/retention-rules.md): rows older than 400 days are deleted by the next recorded action,
-- at most 100 at a time; actions are rare operator requests, so the table stays small.
create table private.retention_activations (
  id bigint generated always as identity primary key,
  action text not null check (action in ('enable', 'stop', 'rollback')),
  operator text not null check (length(operator) between 1 and 200),
  credential text not null check (credential in ('retention_admin', 'admin')),
  generation bigint not null check (generation >= 0),
  request_id text not null check (length(request_id) between 1 and 200),
  at timestamptz not null default app_now()
);

create index retention_activations_at_idx on private.retention_activations (at);

-- Least privilege for the retention cleanup Worker (docs/retention.md "Database role"). The cleanup deletes receipts and fences; with the API's role it could
-- delete or change anything. This is the role its DATABASE_URL's user is made a member of:
-- NOLOGIN (no password lives in a migration); the deploy steps (README) create the login user
-- and `grant reaction_retention_cleanup to <user>`. Idempotent: roles are cluster-wide, so a
-- second database on the same cluster (or a re-run) finds it and only re-applies the grants.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'reaction_retention_cleanup') then
    create role reaction_retention_cleanup nologin;
  end if;
end
$$;

grant usage on schema private to reaction_retention_cleanup;
-- The enable gate, the probe and eligibility read the legacy contract state.
grant select on private.write_contract_state to reaction_retention_cleanup;
-- The batches: select what is eligible, delete it. Nothing else of the reaction tables.
grant select, delete on private.chat_reaction_operations, private.chat_retired_reaction_operations
  to reaction_retention_cleanup;
-- A batch locks what it picked (`for update`, workers/retention/batch.ts), which Postgres
-- allows only with UPDATE on some column: one column, of rows the role may delete anyway.
grant update (created_at) on private.chat_reaction_operations, private.chat_retired_reaction_operations
  to reaction_retention_cleanup;
-- The control row (enable compare-and-set, stop fence, FOR SHARE of each batch) and the
-- activation record (insert, prune past 400 days, read for the status).
grant select, update on private.retention_control to reaction_retention_cleanup;
grant select, insert, delete on private.retention_activations to reaction_retention_cleanup;
do $$
begin
  execute format('grant usage on sequence %s to reaction_retention_cleanup',
                 pg_get_serial_sequence('private.retention_activations', 'id'));
end
$$;

-- The drain check reads other sessions' xact_start (workers/retention/probe.ts), which needs
-- pg_read_all_stats. A migrating role that may not grant it leaves a notice: the check then
-- fails closed (`drain_unverified`) until an administrator grants it (README deploy steps).
do $$
begin
  grant pg_read_all_stats to reaction_retention_cleanup;
exception when insufficient_privilege then
  raise notice 'grant pg_read_all_stats to reaction_retention_cleanup as an administrator: the retention drain check fails closed without it';
end
$$;
