-- The mobile reaction-ticket contract's SQL: one home for its functions (issue 32 item 1).
-- A repeatable file (scripts/lib/migrator.ts): applied after the versioned migrations, again in
-- one transaction whenever this text changes. Only `create or replace`; a signature change is
-- a new function (the previous release keeps calling the old one: docs/operations.md "Two
-- versions at once"). History of each change: migrations 0110 (one statement), 0115 (fewer
-- executor runs), 0130 (admission again after the last lock) and git.
--
-- private.reaction_ticket_call runs a ticketed write or retirement as one autocommit statement
-- (workers/reaction-tickets/ticket-call.ts maps its answers and errors), because reads must
-- follow locks: the rule is one statement when one snapshot suffices, a function when reads
-- must follow locks. Its contract:
-- * lock order: operation advisory lock, retirement advisory lock, message row lock (the same
--   keys as workers/reaction-tickets/locks.ts, which tests hold from another connection);
-- * fresh time and admission: app_now() and the admission rule are read in a statement that
--   runs after each lock is granted, and before any mutation; a volatile plpgsql function
--   takes a new snapshot per statement in read committed, so every read after a lock sees what
--   the previous holder committed;
-- * budgets: statement_timeout set inside a statement does not arm for that statement, so the
--   caller's budget is enforced here: lock_timeout before each lock is the smaller of the lock
--   budget and what is left of the whole budget (at least 1 ms: a spent budget fails the next
--   wait at once, 55P03, a 503);
-- * errors: nothing is written before any of them. Each raises SQLSTATE RLT01 with its key as
--   the message and its details as JSON in DETAIL; the keys are ANSWERS in
--   workers/reaction-tickets/contract-answers.ts (test/node/reaction-tickets/contract-keys.unit.test.ts
--   pins the two against each other).
set local lock_timeout = '5s';
set local statement_timeout = '30s';

-- The exact current reactions of a message as one JSON value (null when it does not exist):
-- {message_id, reaction_version, rows: [{emoji, actor_id}] ordered by emoji, actor_id}.
create or replace function private.reaction_state(p_message text) returns json
language sql stable as $$
  select json_build_object(
    'message_id', m.id,
    'reaction_version', m.reaction_version,
    'rows', coalesce((select json_agg(json_build_object('emoji', r.emoji, 'actor_id', r.actor_id)
                                      order by r.emoji, r.actor_id)
                      from private.message_reactions r where r.message_id = m.id), '[]'))
  from private.messages m where m.id = p_message
$$;

-- Raises a contract error: SQLSTATE RLT01, the key as its message, the details as JSON.
create or replace function private.reaction_ticket_fail(p_key text, p_details json) returns void
language plpgsql as $$
begin
  raise exception using errcode = 'RLT01', message = p_key, detail = coalesce(p_details::text, 'null');
end
$$;

-- Admission, the one place its rule is written (the ticketed write, its forgotten path and
-- the legacy and read routes through workers/reaction-tickets/directory.ts `admit`): the actor
-- exists, the token's iat (seconds, as JWT `iat` is) is not before its last sign-out, and,
-- with a message, the actor is a member of its conversation (a missing message and a
-- non-member look the same, so existence never leaks). Always one row: the refusal's key
-- (null when admitted) and, with a message, its workspace and conversation. A plain SQL
-- function, so the planner inlines it into the statement that calls it (no executor run of
-- its own on the write path).
create or replace function private.reaction_admission(p_actor text, p_issued_at bigint, p_message text)
returns table (refused text, workspace_id text, conversation_id text)
language sql stable as $$
  select case
           when a.id is null then 'unauthorized/unknown_actor'
           when a.signed_out_at is not null
                and (p_issued_at is null or p_issued_at < floor(extract(epoch from a.signed_out_at))::bigint)
             then 'unauthorized/signed_out'
           when p_message is not null and m.id is null then 'not_found'
         end,
         m.workspace_id, m.conversation_id
    from (select p_actor as id) k
    left join private.actors a on a.id = k.id
    left join private.messages m on p_message is not null and a.id is not null and m.id = p_message
      and exists (select 1 from private.conversation_members cm
                   where cm.conversation_id = m.conversation_id and cm.actor_id = a.id)
$$;

-- The terminal expiry answer's details (workers/reaction-tickets/tickets.ts expiredAnswer).
create or replace function private.reaction_ticket_expired(p_operation text, p_expires_at timestamptz,
  p_message text, p_receipt json)
returns void language plpgsql as $$
begin
  perform private.reaction_ticket_fail('operation_expired', json_build_object(
    'operationId', p_operation,
    'expiredAt', p_expires_at,
    'serverTime', app_now(),
    'receipt', p_receipt,
    'message', private.reaction_state(p_message)));
end
$$;

-- p_intent_message is null for a retirement (p_emoji and p_desired too). Returns
-- {replayed, receipt, message} for a write and {status, receipt | retired_at, message} for a
-- retirement; message is private.reaction_state's shape.
create or replace function private.reaction_ticket_call(
  p_retire boolean,
  p_actor text,
  p_issued_at bigint,
  p_operation text,
  p_ticket uuid,
  p_intent_message text,
  p_emoji text,
  p_desired text,
  p_budget_ms int,
  p_lock_ms int
) returns json
language plpgsql as $$
declare
  started timestamptz := clock_timestamp();
  -- The ticket row plus `now_`, `prior` (its receipt as JSON) and admission's refusal (null
  -- when admitted), read after the operation lock.
  t record;
  -- Receives the values of set_config and of the (void) lock functions.
  ignored text;
  now_ timestamptz;
  fenced boolean;
  locked_version bigint;
  changed int;
  state json;
  fence_at timestamptz;
  answer json;
  -- Admission and fresh time, read again after the message lock.
  adm record;
  refused text;
begin
  -- 1. The operation lock, then (its own statement) the ticket, its receipt, admission and
  --    fresh time.
  ignored := set_config('lock_timeout', greatest(1, least(p_lock_ms,
    p_budget_ms - floor(extract(epoch from clock_timestamp() - started) * 1000)::int))::text || 'ms', true);
  ignored := pg_advisory_xact_lock(720101, hashtext(p_actor || '/' || p_operation))::text;
  select tk.*, app_now() as now_,
         (select row_to_json(o) from private.chat_reaction_operations o
           where o.actor_id = p_actor and o.operation_id = p_operation) as prior,
         ad.refused
    into t
    from private.reaction_tickets tk
    left join lateral private.reaction_admission(p_actor, p_issued_at, tk.message_id) ad on true
   where tk.id = p_ticket;
  if not found then
    -- Forgotten: admission first, then the terminal answer.
    select ad.refused into refused from private.reaction_admission(p_actor, p_issued_at, p_intent_message) ad;
    if refused is not null then
      perform private.reaction_ticket_fail(refused, null);
    end if;
    perform private.reaction_ticket_fail('operation_outcome_unknown', json_build_object(
      'operationId', p_operation,
      'message', case when p_intent_message is not null then private.reaction_state(p_intent_message) end));
  end if;
  if t.actor_id <> p_actor or t.operation_id <> p_operation then
    perform private.reaction_ticket_fail('ticket_invalid', null);
  end if;
  if t.refused is not null then
    perform private.reaction_ticket_fail(t.refused, null);
  end if;
  if not p_retire and (t.message_id <> p_intent_message or t.emoji <> p_emoji or t.desired <> p_desired) then
    perform private.reaction_ticket_fail('intent_mismatch', null);
  end if;
  if t.now_ >= t.expires_at then
    perform private.reaction_ticket_expired(t.operation_id, t.expires_at, t.message_id, t.prior);
  end if;
  if t.prior is not null then
    if p_retire then
      return json_build_object('status', 'applied', 'receipt', t.prior,
                               'message', private.reaction_state(t.message_id));
    end if;
    return json_build_object('replayed', true, 'receipt', t.prior,
                             'message', private.reaction_state(t.message_id));
  end if;
  -- A retirement answers with the state read here, under the operation lock (as before).
  if p_retire then
    state := private.reaction_state(t.message_id);
  end if;

  -- 2. The retirement lock, then the fence and fresh time.
  ignored := set_config('lock_timeout', greatest(1, least(p_lock_ms,
    p_budget_ms - floor(extract(epoch from clock_timestamp() - started) * 1000)::int))::text || 'ms', true);
  ignored := pg_advisory_xact_lock(720102, hashtext(p_actor || '/' || p_operation))::text;
  select exists (select 1 from private.chat_retired_reaction_operations
                 where actor_id = p_actor and operation_id = p_operation), app_now()
    into fenced, now_;
  if now_ >= t.expires_at then
    perform private.reaction_ticket_expired(t.operation_id, t.expires_at, t.message_id, null);
  end if;
  if p_retire then
    insert into private.chat_retired_reaction_operations
      (actor_id, operation_id, workspace_id, message_id, contract, ticket_id, ticket_expires_at)
    values (p_actor, p_operation, t.workspace_id, t.message_id, 'ticket', t.id, t.expires_at)
    on conflict (actor_id, operation_id) do nothing;
    select f.created_at into fence_at from private.chat_retired_reaction_operations f
      where f.actor_id = p_actor and f.operation_id = p_operation;
    return json_build_object('status', 'retired', 'retired_at', fence_at, 'message', state);
  end if;
  if fenced then
    perform private.reaction_ticket_fail('operation_retired', json_build_object(
      'operationId', p_operation, 'message', private.reaction_state(t.message_id)));
  end if;

  -- 3. The message row lock, then fresh time: the last expiry check before the mutation.
  ignored := set_config('lock_timeout', greatest(1, least(p_lock_ms,
    p_budget_ms - floor(extract(epoch from clock_timestamp() - started) * 1000)::int))::text || 'ms', true);
  select m.reaction_version into locked_version from private.messages m where m.id = t.message_id for update;
  if not found then
    perform private.reaction_ticket_fail('not_found', null);
  end if;
  -- Admission again, with the fresh time of the same statement: a sign-out or a removal from
  -- the conversation committed while this waited on a lock stops it here, as a passed expiry
  -- does.
  select ad.refused, app_now() as now_ into adm
    from private.reaction_admission(p_actor, p_issued_at, t.message_id) ad;
  if adm.refused is not null then
    perform private.reaction_ticket_fail(adm.refused, null);
  end if;
  if adm.now_ >= t.expires_at then
    perform private.reaction_ticket_expired(t.operation_id, t.expires_at, t.message_id, null);
  end if;
  if t.desired = 'present' then
    insert into private.message_reactions (message_id, actor_id, emoji)
    values (t.message_id, t.actor_id, t.emoji) on conflict do nothing;
  else
    delete from private.message_reactions
    where message_id = t.message_id and actor_id = t.actor_id and emoji = t.emoji;
  end if;
  get diagnostics changed = row_count;
  -- The version bump (only when a row changed), the receipt and the answer, one statement.
  with bumped as (
    update private.messages set reaction_version = reaction_version + 1, updated_at = app_now()
     where id = t.message_id and changed > 0
    returning reaction_version
  ), receipt as (
    insert into private.chat_reaction_operations
      (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, outcome,
       reaction_version, contract, ticket_id, ticket_expires_at)
    select t.actor_id, t.operation_id, t.workspace_id, t.conversation_id, t.message_id, t.emoji,
           t.desired,
           case when changed = 0 then 'unchanged' when t.desired = 'present' then 'added' else 'removed' end,
           coalesce((select reaction_version from bumped), locked_version), 'ticket', t.id, t.expires_at
    returning *
  )
  select json_build_object(
    'replayed', false,
    'receipt', (select row_to_json(receipt) from receipt),
    'message', json_build_object(
      'message_id', t.message_id,
      'reaction_version', coalesce((select reaction_version from bumped), locked_version),
      'rows', coalesce((select json_agg(json_build_object('emoji', r.emoji, 'actor_id', r.actor_id)
                                        order by r.emoji, r.actor_id)
                        from private.message_reactions r where r.message_id = t.message_id), '[]')))
    into answer;
  return answer;
end
$$;
