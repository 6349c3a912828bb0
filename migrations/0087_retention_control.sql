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
