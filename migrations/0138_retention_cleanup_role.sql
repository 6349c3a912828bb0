-- Issue 29 hole 10: least privilege for the retention cleanup Worker (docs/retention.md
-- "Database role"). The cleanup deletes receipts and fences; with the API's role it could
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
