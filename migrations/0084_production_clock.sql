-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- squawk-ignore-file ban-drop-table -- app_test_clock is the test harness's clock (test/setup/test-clock.sql): no production client reads it
-- Production databases have no test clock (issue 16). 0001 made app_now() honour a session
-- setting (app.clock_offset_ms) and, with app.test_clock on, the app_test_clock table; 0020 let
-- app.test_clock reopen the closed legacy write contract. Any session could set either. From
-- here app_now() is the database clock and the contract's close is one-way for everyone.
--
-- The test harness installs its clock into its template database after migrating
-- (test/setup/test-clock.sql): it exists only there and in the test databases copied from it.
create or replace function app_now() returns timestamptz
language sql volatile parallel safe as $$
  select clock_timestamp()
$$;

drop table if exists app_test_clock;

create or replace function private.write_contract_no_reopen() returns trigger
language plpgsql as $$
begin
  if old.closed_at is not null and new.closed_at is null then
    raise exception 'the legacy write contract is closed for good' using errcode = '55000';
  end if;
  return new;
end
$$;
