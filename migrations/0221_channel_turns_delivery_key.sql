-- migrate:no-transaction
-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- concurrent builds run under the runner's session lock and statement timeouts (scripts/lib/migrator.ts); a session SET here would outlive this file
-- Issue 33 item 4: a turn is named by its reply uuid (delivery_key, one per turn) in the
-- re-run routes (POST /admin/lark/installations/:id/turns/:turnId/rerun, the console's
-- `turn-rerun`); without this the lookup read every turn.
create index concurrently if not exists channel_turns_delivery_key on channel_turns (delivery_key);
