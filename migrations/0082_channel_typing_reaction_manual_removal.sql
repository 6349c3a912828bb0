-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- squawk-ignore-file prefer-bigint-over-int -- a Lark error code, not an id
-- Manual removal of the badges the service gave up on (docs/typing-ledger.md "Manual removal",
-- docs/operations.md). Nullable, no default: adding them is a catalog-only change, no table
-- rewrite (the check scans the table once, as 0045's did; every value is null). No foreign
-- keys, no cascades; the values live and are pruned with their row (tombstones go seven days
-- after their terminal timestamp; a manual removal does not move that timestamp).
--   last_attempt_at         the retry pass's last claim of the row (its last remote attempt)
--   manual_removal_at       the last removal an operator asked for
--                           (POST /admin/typing-reactions/rows/:id/remove)
--   manual_removal_outcome  its result:
--     removed        our badge was deleted now
--     already_gone   Lark says the reaction or message is gone
--     none_found     a sweep listed every page and found no `Typing` of this app
--     retryable      Lark or the network failed (5xx, 429, timeout, partial listing)
--     permanent      Lark refused (revoked app, no permission)
--   manual_removal_code     Lark's code (or the HTTP status) of a failed removal
alter table channel_typing_reaction
  add column if not exists last_attempt_at timestamptz,
  add column if not exists manual_removal_at timestamptz,
  add column if not exists manual_removal_outcome text
    check (manual_removal_outcome in ('removed', 'already_gone', 'none_found', 'retryable', 'permanent')),
  add column if not exists manual_removal_code integer;
