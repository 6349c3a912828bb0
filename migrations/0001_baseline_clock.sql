-- Baseline (issue 32 item 4: the unreleased series 0001–0201 squashed per feature before the
-- first release; scripts/migration-baseline.json names the commit whose history this replaces,
-- and test/node/foundation/schema-baseline.test.ts proves the schema identical).
--
-- Database time for every deadline the service decides in SQL: app_now() is the database
-- clock, which nothing in a migrated database can move. The test harness installs its own
-- clock into its template database after migrating (test/setup/test-clock.sql): it exists only
-- there and in the test databases copied from it, never in a migrated (production) database.
-- Kept in a versioned file, not functions/: the harness replaces app_now() after migrating,
-- and a re-applied repeatable file must never put the production clock back under a test.
set local lock_timeout = '5s';
set local statement_timeout = '30s';

create function app_now() returns timestamptz
language sql volatile parallel safe as $$
  select clock_timestamp()
$$;

-- Epoch milliseconds of app_now(), for columns kept as bigint milliseconds.
create function app_now_ms() returns bigint
language sql volatile parallel safe as $$
  select (extract(epoch from app_now()) * 1000)::bigint
$$;
