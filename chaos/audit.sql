-- The chaos run's audit (never a migration): installed into the chaos template after the test
-- clock, so every schedule's database records the transitions an end-state check cannot see.
-- Each row is written in the transaction that made the change, so a rolled-back change leaves
-- none. Read by chaos/invariants.ts.
create schema chaos;

create table chaos.ledger_transitions (
  id bigserial primary key,
  row_id text not null,
  at timestamptz not null default app_now(),
  revived boolean not null,
  snapshot_after_terminal boolean not null
);

create function chaos.audit_ledger() returns trigger language plpgsql as $$
declare
  was_terminal boolean := old.cleaned_at is not null or old.abandoned_at is not null;
  is_terminal boolean := new.cleaned_at is not null or new.abandoned_at is not null;
begin
  if (was_terminal and not is_terminal) or (is_terminal and new.credential_snapshot is not null) then
    insert into chaos.ledger_transitions (row_id, revived, snapshot_after_terminal)
    values (new.id, was_terminal and not is_terminal, is_terminal and new.credential_snapshot is not null);
  end if;
  return new;
end $$;

create trigger chaos_audit_ledger after update on channel_typing_reaction
  for each row execute function chaos.audit_ledger();

-- Messages whose ledger row the seven-day lifetime expired: the badge is then an operator's
-- (docs/typing-ledger.md). Kept here because the prune deletes the row 7 days later, and a
-- later clock jump would otherwise leave the exemption nothing to read.
create table chaos.ledger_expired (
  source_message_id text not null,
  at timestamptz not null default app_now()
);

create function chaos.audit_expired() returns trigger language plpgsql as $$
begin
  insert into chaos.ledger_expired (source_message_id) values (new.source_message_id);
  return new;
end $$;

create trigger chaos_audit_expired after update on channel_typing_reaction
  for each row when (new.retention_outcome = 'expired' and old.retention_outcome is distinct from 'expired')
  execute function chaos.audit_expired();

-- Every receipt and fence deleted, with the row as it was, the database time of the delete and
-- whether the cleanup was enabled in the latest committed control row at that moment (a
-- plpgsql statement takes a fresh snapshot, so a stop's fence that committed before this row
-- was deleted is seen here).
create table chaos.retention_deletes (
  id bigserial primary key,
  tbl text not null,
  at timestamptz not null default app_now(),
  control_enabled boolean,
  row_data jsonb not null
);

create function chaos.audit_delete() returns trigger language plpgsql as $$
begin
  insert into chaos.retention_deletes (tbl, control_enabled, row_data)
  values (tg_table_name, (select c.enabled from private.retention_control c), to_jsonb(old));
  return old;
end $$;

create trigger chaos_audit_receipts after delete on private.chat_reaction_operations
  for each row execute function chaos.audit_delete();
create trigger chaos_audit_fences after delete on private.chat_retired_reaction_operations
  for each row execute function chaos.audit_delete();

-- Every recovery message enqueued (`effect:<id>:recovery`): a retirement must send exactly one,
-- and the mailbox prunes delivered messages, so the count is kept here.
create table chaos.recovery_messages (
  id bigserial primary key,
  instance_id text not null,
  message_key text not null,
  at timestamptz not null default app_now()
);

create function chaos.audit_recovery() returns trigger language plpgsql as $$
begin
  if new.message_key like 'effect:%:recovery' then
    insert into chaos.recovery_messages (instance_id, message_key) values (new.instance_id, new.message_key);
  end if;
  return new;
end $$;

create trigger chaos_audit_recovery after insert on actor_mailbox
  for each row execute function chaos.audit_recovery();

-- Copies of every turn and input as last written: housekeeping deletes channel history after
-- seven days (a clock jump past that is a schedule step), the checks still need it.
create table chaos.turns (like channel_turns);
alter table chaos.turns add primary key (session_id, turn_no);
create table chaos.inputs (like lark_inbound_messages);

create function chaos.audit_turn() returns trigger language plpgsql as $$
begin
  delete from chaos.turns where session_id = new.session_id and turn_no = new.turn_no;
  insert into chaos.turns select new.*;
  return new;
end $$;

create trigger chaos_audit_turns after insert or update on channel_turns
  for each row execute function chaos.audit_turn();

create function chaos.audit_input() returns trigger language plpgsql as $$
begin
  insert into chaos.inputs select new.*;
  return new;
end $$;

create trigger chaos_audit_inputs after insert or update on lark_inbound_messages
  for each row execute function chaos.audit_input();

-- Copies of every streamed reply's card record (channel_reply_cards) as last written: the rows
-- go with their turn (a cascade from the turns' housekeeping), the card checks still need them
-- to tie a card at the emulator to its turn and to the sequences reserved on it.
create table chaos.reply_cards (like channel_reply_cards);
alter table chaos.reply_cards add primary key (session_id, turn_no);

create function chaos.audit_reply_card() returns trigger language plpgsql as $$
begin
  delete from chaos.reply_cards where session_id = new.session_id and turn_no = new.turn_no;
  insert into chaos.reply_cards select new.*;
  return new;
end $$;

create trigger chaos_audit_reply_cards after insert or update on channel_reply_cards
  for each row execute function chaos.audit_reply_card();
