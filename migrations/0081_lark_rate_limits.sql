-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Lark's rate-limit resets (x-ogw-ratelimit-reset on a 429), one row per (API host, App ID,
-- route), so every isolate honours a reset another one received (workers/lark/rate-limits.ts).
-- Lark limits each API per app: reactions create, delete and list are separate routes.
-- Retention: a row whose not_before has passed holds nothing and is deleted by the typing
-- maintenance prune pass (workers/typing-ledger/passes/prune.ts, index below). The table is
-- bounded by apps x routes. No foreign key: the gate outlives nothing it refers to.
create table if not exists lark_rate_limits (
  api_base text not null,
  app_id text not null,
  route text not null,
  not_before timestamptz not null,
  updated_at timestamptz not null default app_now(),
  primary key (api_base, app_id, route)
);

create index if not exists lark_rate_limits_not_before on lark_rate_limits (not_before);
