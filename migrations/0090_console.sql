-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- squawk-ignore-file prefer-bigint-over-int -- durations, per-pass row counts (each pass is bounded at 1,000 rows), Lark codes and HTTP statuses, not ids
-- The operator console (issue 19, docs/operations.md "Console"): the history its panels show
-- and the audit of its actions. Small tables, each with its retention rule
-- (docs/retention-rules.md), enforced by the minute housekeeping's `console` step
-- (workers/housekeeping/console-history.ts), bounded batches through the `at` indexes.

-- Every console action, done or refused: who (the operator named at sign-in), what, on what,
-- the outcome, when (database time). Kept 90 days.
create table if not exists console_audit (
  id bigint generated always as identity primary key,
  at timestamptz not null default app_now(),
  operator text not null check (length(operator) between 1 and 200),
  action text not null check (length(action) between 1 and 64),
  target text check (length(target) <= 200),
  outcome text not null check (length(outcome) between 1 and 200),
  request_id text not null check (length(request_id) <= 200)
);
create index if not exists console_audit_at on console_audit (at);

-- One row per typing maintenance run (durable-objects/typing-maintenance.ts), counters only.
-- At most one run per 30 s: ~2,900 rows a day. Kept 3 days.
create table if not exists typing_maintenance_runs (
  id bigint generated always as identity primary key,
  at timestamptz not null default app_now(),
  duration_ms integer not null,
  budget_ms integer not null,
  stopped boolean not null,
  expired integer not null,
  pruned integer not null,
  claimed integer not null,
  cleaned integer not null,
  deferred integer not null,
  failed_steps integer not null
);
create index if not exists typing_maintenance_runs_at on typing_maintenance_runs (at);

-- Typing-ledger incidents the spec asks operators to alert on, one row each, appended by the
-- statement that decides them (no row two requests contend on):
--  - quota_skip: an Add the workspace quota (1,000 pending) refused, in the registering
--    statement (at most one per inbound message);
--  - withdraw_failed: a withdrawal Lark did not confirm (immediate, or a retry pass), in the
--    statement that schedules the row's retry (at most one per row per attempt).
-- Kept 2 days (the console shows 24 h).
create table if not exists typing_incidents (
  workspace_id text not null,
  kind text not null check (kind in ('quota_skip', 'withdraw_failed')),
  at timestamptz not null default app_now()
);
create index if not exists typing_incidents_at on typing_incidents (at);

-- The last failed Lark Open API call per app (one installation per app since 0083): route,
-- Lark's business code (0: none, e.g. a timeout) and HTTP status. Overwritten by the next
-- failure; deleted 30 days after it.
create table if not exists lark_api_errors (
  api_base text not null,
  app_id text not null,
  route text not null,
  code integer not null,
  http_status integer not null,
  at timestamptz not null default app_now(),
  primary key (api_base, app_id)
);
create index if not exists lark_api_errors_at on lark_api_errors (at);
