-- squawk-ignore-file prefer-bigint-over-int -- a TTL in seconds (bounded by the config's schema, years at most) never nears int4's limit
-- squawk-ignore-file require-concurrent-index-creation -- every index is on a table this file creates: empty, in this transaction
-- Baseline of the mobile reaction API (issue 32 item 4; the squashed series was 0020, 0060, 0084,
-- 0088, 0110, 0115–0118, 0130, 0139): chat directory, current reactions, operation tickets,
-- receipts, retirement fences, the admission-window history and the legacy write-contract
-- state, all in `private`. The contract's functions are repeatable:
-- migrations/functions/reaction_tickets.sql.
--
-- Cascades follow the retention spec: receipts go with their actor, workspace, conversation
-- or message; retirement fences go only with their actor (a fence must outlive the message
-- so a delayed write for it stays rejected). Every created_at / expiry column is stamped
-- from app_now().
set local lock_timeout = '5s';
set local statement_timeout = '30s';

create schema if not exists private;

create table private.workspaces (
  id text primary key check (id ~ '^[A-Za-z0-9_.:-]{1,128}$'),
  name text not null default '',
  created_at timestamptz not null default app_now(),
  updated_at timestamptz not null default app_now()
);

create table private.actors (
  id text primary key check (id ~ '^[A-Za-z0-9_.:-]{1,128}$'),
  workspace_id text not null references private.workspaces (id) on delete cascade,
  display_name text not null default '',
  -- Bearer tokens issued before this instant are refused (sign-out ends every session).
  signed_out_at timestamptz,
  created_at timestamptz not null default app_now(),
  updated_at timestamptz not null default app_now()
);
create index actors_workspace_idx on private.actors (workspace_id);

create table private.conversations (
  id text primary key check (id ~ '^[A-Za-z0-9_.:-]{1,128}$'),
  workspace_id text not null references private.workspaces (id) on delete cascade,
  title text not null default '',
  created_at timestamptz not null default app_now(),
  updated_at timestamptz not null default app_now()
);
create index conversations_workspace_idx on private.conversations (workspace_id);

create table private.conversation_members (
  conversation_id text not null references private.conversations (id) on delete cascade,
  actor_id text not null references private.actors (id) on delete cascade,
  created_at timestamptz not null default app_now(),
  primary key (conversation_id, actor_id)
);
create index conversation_members_actor_idx on private.conversation_members (actor_id);

-- messages.id and the receipts' operation_id are checked on every ticketed write (the version
-- bump re-checks the row, the receipt is inserted) while the message row lock is held, so their
-- CHECKs avoid a counted regex repeat (`{1,128}` builds a DFA state per repetition in each
-- match: 8-11 µs against 0.5 µs with `+` and a length bound; same sets of values).
create table private.messages (
  id text primary key check (id ~ '^[A-Za-z0-9_.:-]+$' and length(id) <= 128),
  workspace_id text not null references private.workspaces (id) on delete cascade,
  conversation_id text not null references private.conversations (id) on delete cascade,
  author_actor_id text references private.actors (id) on delete set null,
  body text not null default '',
  -- Bumped by every reaction change under the message row lock (message serialization).
  reaction_version bigint not null default 0,
  created_at timestamptz not null default app_now(),
  updated_at timestamptz not null default app_now()
);
create index messages_conversation_idx on private.messages (conversation_id);
create index messages_workspace_idx on private.messages (workspace_id);

-- The current reactions: one row per message, actor and emoji.
create table private.message_reactions (
  message_id text not null references private.messages (id) on delete cascade,
  actor_id text not null references private.actors (id) on delete cascade,
  emoji text not null check (length(emoji) between 1 and 64),
  created_at timestamptz not null default app_now(),
  primary key (message_id, actor_id, emoji)
);
create index message_reactions_actor_idx on private.message_reactions (actor_id);

-- Server-stored operation tickets: one per (actor, operation ID), bound to the canonical
-- intent and an absolute expiry. The bearer form is HMAC-signed over the ticket ID.
create table private.reaction_tickets (
  id uuid primary key default gen_random_uuid(),
  actor_id text not null references private.actors (id) on delete cascade,
  operation_id text not null check (operation_id ~ '^[A-Za-z0-9_-]{8,64}$'),
  workspace_id text not null references private.workspaces (id) on delete cascade,
  conversation_id text not null references private.conversations (id) on delete cascade,
  message_id text not null references private.messages (id) on delete cascade,
  emoji text not null check (length(emoji) between 1 and 64),
  desired text not null check (desired in ('present', 'absent')),
  key_version text not null,
  created_at timestamptz not null default app_now(),
  expires_at timestamptz not null,
  check (expires_at > created_at),
  unique (actor_id, operation_id)
);
create index reaction_tickets_actor_expiry_idx on private.reaction_tickets (actor_id, expires_at);
create index reaction_tickets_expires_idx on private.reaction_tickets (expires_at);
create index reaction_tickets_message_idx on private.reaction_tickets (message_id);
create index reaction_tickets_conversation_idx on private.reaction_tickets (conversation_id);
create index reaction_tickets_workspace_idx on private.reaction_tickets (workspace_id);

-- Operation receipts: actor-bound, keyed by operation ID, canonical intent and outcome.
-- `contract` says which write contract admitted it; legacy receipts have no ticket expiry.
create table private.chat_reaction_operations (
  actor_id text not null references private.actors (id) on delete cascade,
  operation_id text not null check (operation_id ~ '^[A-Za-z0-9_-]+$' and length(operation_id) between 8 and 64),
  workspace_id text not null references private.workspaces (id) on delete cascade,
  conversation_id text not null references private.conversations (id) on delete cascade,
  message_id text not null references private.messages (id) on delete cascade,
  emoji text not null,
  desired text not null check (desired in ('present', 'absent')),
  outcome text not null check (outcome in ('added', 'removed', 'unchanged')),
  reaction_version bigint not null,
  contract text not null check (contract in ('ticket', 'legacy')),
  ticket_id uuid references private.reaction_tickets (id) on delete set null,
  ticket_expires_at timestamptz,
  created_at timestamptz not null default app_now(),
  check ((contract = 'ticket') = (ticket_expires_at is not null)),
  primary key (actor_id, operation_id)
);
create index chat_reaction_operations_message_idx on private.chat_reaction_operations (message_id);
create index chat_reaction_operations_conversation_idx
  on private.chat_reaction_operations (conversation_id);
create index chat_reaction_operations_workspace_idx on private.chat_reaction_operations (workspace_id);
create index chat_reaction_operations_legacy_idx
  on private.chat_reaction_operations (created_at) where contract = 'legacy';
-- Deleting a ticket (housekeeping) sets its receipt's ticket_id to null through the foreign
-- key: without an index each deleted ticket scanned every receipt. Partial: `ticket_id = $1`
-- implies not null.
create index chat_reaction_operations_ticket_idx
  on private.chat_reaction_operations (ticket_id) where ticket_id is not null;
-- The retention cleanup's stable cursor key (docs/retention.md): a batch is one bounded range
-- scan `created_at < cutoff and (created_at, actor_id, operation_id) > cursor`, with ticket
-- expiry and the contract read from the INCLUDE. Also every created_at range (console trends).
create index chat_reaction_operations_retention_key_idx
  on private.chat_reaction_operations (created_at, actor_id, operation_id)
  include (ticket_expires_at, contract);

-- Retirement fences: a retired operation can never apply. Cascade only with the actor.
create table private.chat_retired_reaction_operations (
  actor_id text not null references private.actors (id) on delete cascade,
  operation_id text not null check (operation_id ~ '^[A-Za-z0-9_-]{8,64}$'),
  workspace_id text,
  message_id text,
  contract text not null check (contract in ('ticket', 'legacy')),
  ticket_id uuid,
  ticket_expires_at timestamptz,
  created_at timestamptz not null default app_now(),
  check ((contract = 'ticket') = (ticket_expires_at is not null)),
  primary key (actor_id, operation_id)
);
create index chat_retired_reaction_operations_legacy_idx
  on private.chat_retired_reaction_operations (created_at) where contract = 'legacy';
create index chat_retired_reaction_operations_retention_key_idx
  on private.chat_retired_reaction_operations (created_at, actor_id, operation_id)
  include (ticket_expires_at, contract);

-- The legacy unbounded desired-state write contract (no ticket, no expiry). Open until an
-- operator closes it; closing is one-way. Every legacy write holds this row FOR SHARE for its
-- whole transaction, so the closing UPDATE returns only after every admitted legacy
-- transaction has ended: drained_at records that instant.
create table private.write_contract_state (
  contract text primary key check (contract = 'legacy_desired_state'),
  opened_at timestamptz not null default app_now(),
  closed_at timestamptz,
  drained_at timestamptz,
  closed_by text,
  check ((closed_at is null) = (drained_at is null))
);
insert into private.write_contract_state (contract) values ('legacy_desired_state');

-- Rollback must never reopen the unbounded path: closing is one-way for everyone. Kept in a
-- versioned file: a trigger function, and a guarantee no later text may quietly change.
create function private.write_contract_no_reopen() returns trigger
language plpgsql as $$
begin
  if old.closed_at is not null and new.closed_at is null then
    raise exception 'the legacy write contract is closed for good' using errcode = '55000';
  end if;
  return new;
end
$$;
create trigger write_contract_no_reopen before update on private.write_contract_state
  for each row execute function private.write_contract_no_reopen();

-- Raising REACTION_TICKET_TTL_SECONDS must never reopen an operation that was judged (and
-- possibly forgotten: ticket, receipt and fence deleted) under a shorter window.
-- The rule (docs/mobile-api.md "Admission window"): an operation stamped at S is admitted until
-- S + the SMALLEST window in force at any time since S (the one in force at S included, and the
-- configured one now). So a raise applies only to operations stamped after it, and a lowering
-- applies at once to every operation. Every new-ticket issuance records the window it runs
-- under when it differs from the latest recorded one (workers/reaction-tickets/tickets.ts); a
-- window nobody issued under never admitted anything, so it need not be recorded.
--
-- Seeded with the default (7 days) as in force since always.
create table private.reaction_ticket_windows (
  in_force_from timestamptz not null,
  ttl_seconds integer not null check (ttl_seconds > 0)
);

create index reaction_ticket_windows_from_idx
  on private.reaction_ticket_windows (in_force_from);

insert into private.reaction_ticket_windows (in_force_from, ttl_seconds) values ('-infinity', 604800);
