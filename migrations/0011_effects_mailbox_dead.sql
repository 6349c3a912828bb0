-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- squawk-ignore-file prefer-bigint-over-int -- an attempts counter, not an id
-- Poison messages (docs/effects.md): a message whose handler keeps throwing no longer blocks
-- its instance's mailbox forever. Each failed delivery counts an attempt; after the last one
-- the message is 'dead' (terminal, never redelivered, pruned like delivered ones).
-- Constant defaults: adding these columns rewrites nothing.
alter table actor_mailbox
  add column attempts int not null default 0,
  -- The handler's error text, truncated; never the payload.
  add column last_error text,
  add column dead_at_ms bigint;

-- Widen the state check. Added NOT VALID so this transaction does not scan the mailbox under
-- its exclusive lock; 0012 validates it outside a transaction.
alter table actor_mailbox drop constraint actor_mailbox_state_check;
alter table actor_mailbox add constraint actor_mailbox_state_check
  check (state in ('pending', 'delivered', 'dead')) not valid;
