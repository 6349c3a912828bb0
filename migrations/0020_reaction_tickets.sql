-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Mobile reaction API (issue 7): chat directory, current reactions, operation tickets,
-- receipts, retirement fences and the legacy write-contract state, all in `private`.
--
-- Cascades follow the retention spec: receipts go with their actor, workspace, conversation
-- or message; retirement fences go only with their actor (a fence must outlive the message
-- so a delayed write for it stays rejected). Every created_at / expiry column is stamped
-- from app_now() and indexed, because the hourly retention cleanup selects by them.
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

create table private.messages (
  id text primary key check (id ~ '^[A-Za-z0-9_.:-]{1,128}$'),
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
  operation_id text not null check (operation_id ~ '^[A-Za-z0-9_-]{8,64}$'),
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
create index chat_reaction_operations_created_idx on private.chat_reaction_operations (created_at);
create index chat_reaction_operations_ticket_expiry_idx
  on private.chat_reaction_operations (ticket_expires_at);
create index chat_reaction_operations_message_idx on private.chat_reaction_operations (message_id);
create index chat_reaction_operations_conversation_idx
  on private.chat_reaction_operations (conversation_id);
create index chat_reaction_operations_workspace_idx on private.chat_reaction_operations (workspace_id);
create index chat_reaction_operations_legacy_idx
  on private.chat_reaction_operations (created_at) where contract = 'legacy';

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
create index chat_retired_reaction_operations_created_idx
  on private.chat_retired_reaction_operations (created_at);
create index chat_retired_reaction_operations_ticket_expiry_idx
  on private.chat_retired_reaction_operations (ticket_expires_at);
create index chat_retired_reaction_operations_legacy_idx
  on private.chat_retired_reaction_operations (created_at) where contract = 'legacy';

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

-- Rollback must never reopen the unbounded path. Only a test database (app.test_clock on)
-- may reopen it, so test files sharing one database can exercise both states.
create function private.write_contract_no_reopen() returns trigger
language plpgsql as $$
begin
  if old.closed_at is not null and new.closed_at is null
     and coalesce(current_setting('app.test_clock', true), '') <> 'on' then
    raise exception 'the legacy write contract is closed for good' using errcode = '55000';
  end if;
  return new;
end
$$;
create trigger write_contract_no_reopen before update on private.write_contract_state
  for each row execute function private.write_contract_no_reopen();
