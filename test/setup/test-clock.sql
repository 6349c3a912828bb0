-- The test clock (never a migration: production databases must not have one). Installed into
-- the test template after every migration (test/setup/stack.ts), so each test file's database,
-- a copy of the template, has it. Tests move app_now() for every connection to their database,
-- routes and Durable Objects included, with test/helpers/db.ts (setDbClockOffset,
-- advanceDbClock), never by sleeping.
create table app_test_clock (
  only_row boolean primary key default true check (only_row),
  offset_ms bigint not null default 0
);
insert into app_test_clock default values;
-- Every role reads app_now(), so every role reads the offset (the cleanup's own role of
-- migrations/0060_baseline_retention.sql included); only the test owner changes it.
grant select on app_test_clock to public;

create or replace function app_now() returns timestamptz
language sql volatile parallel safe as $$
  select clock_timestamp() + (select offset_ms from app_test_clock) * interval '1 millisecond'
$$;
