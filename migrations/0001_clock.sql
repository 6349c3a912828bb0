-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Database time for every deadline the service decides in SQL.
--
-- app_now() is clock_timestamp() shifted by a test clock, so tests move time instead of
-- sleeping. Two ways, both inert in production:
--   * per connection: set app.clock_offset_ms = '120000';
--   * per database (for code that opens its own connections, such as routes and Durable
--     Objects): the test harness runs `alter database … set app.test_clock = 'on'`, and
--     tests update app_test_clock.offset_ms.
create table app_test_clock (
  only_row boolean primary key default true check (only_row),
  offset_ms bigint not null default 0
);
insert into app_test_clock default values;

create function app_now() returns timestamptz
language sql volatile parallel safe as $$
  select clock_timestamp()
    + coalesce(nullif(current_setting('app.clock_offset_ms', true), '')::bigint, 0) * interval '1 millisecond'
    + case when current_setting('app.test_clock', true) = 'on'
        then coalesce((select offset_ms from app_test_clock), 0) * interval '1 millisecond'
        else interval '0' end
$$;

-- Epoch milliseconds of app_now(), for columns kept as bigint milliseconds.
create function app_now_ms() returns bigint
language sql volatile parallel safe as $$
  select (extract(epoch from app_now()) * 1000)::bigint
$$;
