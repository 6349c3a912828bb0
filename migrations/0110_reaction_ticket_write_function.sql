-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- The ticketed reaction write and retirement in one round trip (issue 18 item 3).
--
-- workers/reaction-tickets/operations.ts used to run the contract as 9 round trips (begin, the
-- operation lock, the ticket read, admission, the retirement lock, the fence read, the message
-- lock, the guarded mutation, commit); on a hot message the message row lock was held across
-- the last two. The same steps now run here, called as one autocommit statement: the locks
-- are released when the statement ends, not a client round trip later.
--
-- Unchanged contract:
-- * lock order: operation advisory lock, retirement advisory lock, message row lock (the same
--   keys as workers/reaction-tickets/locks.ts, which tests hold from another connection);
-- * fresh time: app_now() (the test clock in tests, clock_timestamp() in production) is read
--   in a statement that runs after each lock is granted, and before any mutation; a volatile
--   plpgsql function takes a new snapshot per statement in read committed, so every read after
--   a lock sees what the previous holder committed;
-- * budgets: statement_timeout set inside a statement does not arm for that statement, so the
--   caller's budget is enforced here: lock_timeout before each lock is the smaller of the lock
--   budget and what is left of the whole budget (at least 1 ms, so a spent budget fails the
--   next wait at once: 55P03, the same 503 as before). The work between locks is a few index
--   probes; the session's own statement_timeout (the pool's) stays the outer ceiling.
-- * errors: nothing is written before any of them (every check precedes the mutation, and a
--   raise rolls the statement back anyway). Each raises SQLSTATE RLT01 with the error key as
--   the message and its details as JSON in DETAIL; workers/reaction-tickets/ticket-call.ts maps
--   them to the same typed AppErrors (codes, texts, details) as before.

-- The exact current reactions of a message as one JSON value (null when it does not exist):
-- {message_id, reaction_version, rows: [{emoji, actor_id}] ordered by emoji, actor_id}.
create function private.reaction_state(p_message text) returns json
language sql stable as $$
  select json_build_object(
    'message_id', m.id,
    'reaction_version', m.reaction_version,
    'rows', coalesce((select json_agg(json_build_object('emoji', r.emoji, 'actor_id', r.actor_id)
                                      order by r.emoji, r.actor_id)
                      from private.message_reactions r where r.message_id = m.id), '[]'))
  from private.messages m where m.id = p_message
$$;

create function private.reaction_ticket_fail(p_key text, p_details json) returns void
language plpgsql as $$
begin
  raise exception using errcode = 'RLT01', message = p_key, detail = coalesce(p_details::text, 'null');
end
$$;

-- Admission (directory.ts admitToMessage / admitActor): the actor exists, the token's iat (in
-- seconds) is not before its last sign-out, and, with a message, the actor is a member of its
-- conversation. Raises the same answers; returns the message's workspace and conversation.
create function private.reaction_admit(p_actor text, p_issued_at bigint, p_message text,
  out workspace_id text, out conversation_id text)
language plpgsql as $$
declare
  signed_out_s bigint;
  found_actor boolean := false;
begin
  select true, floor(extract(epoch from a.signed_out_at))::bigint, m.workspace_id, m.conversation_id
    into found_actor, signed_out_s, workspace_id, conversation_id
  from private.actors a
  left join private.messages m on p_message is not null and m.id = p_message
    and exists (select 1 from private.conversation_members cm
                where cm.conversation_id = m.conversation_id and cm.actor_id = a.id)
  where a.id = p_actor;
  if found_actor is not true then
    perform private.reaction_ticket_fail('unauthorized/unknown_actor', null);
  end if;
  if signed_out_s is not null and (p_issued_at is null or p_issued_at < signed_out_s) then
    perform private.reaction_ticket_fail('unauthorized/signed_out', null);
  end if;
  if p_message is not null and (workspace_id is null or conversation_id is null) then
    perform private.reaction_ticket_fail('not_found', null);
  end if;
end
$$;

create function private.reaction_ticket_expired(p_operation text, p_expires_at timestamptz,
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
create function private.reaction_ticket_call(
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
  -- The ticket row plus `prior` (its receipt as JSON) and `now_`, read after the operation lock.
  t record;
  now_ timestamptz;
  fenced boolean;
  locked_version bigint;
  changed int;
  outcome text;
  version bigint;
  receipt json;
  state json;
  fence_at timestamptz;
begin
  -- 1. The operation lock, then (its own statement) the ticket, its receipt and fresh time.
  perform set_config('lock_timeout', greatest(1, least(p_lock_ms,
    p_budget_ms - floor(extract(epoch from clock_timestamp() - started) * 1000)::int))::text || 'ms', true);
  perform pg_advisory_xact_lock(720101, hashtext(p_actor || '/' || p_operation));
  select tk.*, app_now() as now_,
         (select row_to_json(o) from private.chat_reaction_operations o
           where o.actor_id = p_actor and o.operation_id = p_operation) as prior
    into t from private.reaction_tickets tk where tk.id = p_ticket;
  if not found then
    -- Forgotten (operations.ts forgottenError): admission first, then the terminal answer.
    perform private.reaction_admit(p_actor, p_issued_at, p_intent_message);
    perform private.reaction_ticket_fail('operation_outcome_unknown', json_build_object(
      'operationId', p_operation,
      'message', case when p_intent_message is not null then private.reaction_state(p_intent_message) end));
  end if;
  if t.actor_id <> p_actor or t.operation_id <> p_operation then
    perform private.reaction_ticket_fail('ticket_invalid', null);
  end if;
  perform private.reaction_admit(p_actor, p_issued_at, t.message_id);
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
  perform set_config('lock_timeout', greatest(1, least(p_lock_ms,
    p_budget_ms - floor(extract(epoch from clock_timestamp() - started) * 1000)::int))::text || 'ms', true);
  perform pg_advisory_xact_lock(720102, hashtext(p_actor || '/' || p_operation));
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
  perform set_config('lock_timeout', greatest(1, least(p_lock_ms,
    p_budget_ms - floor(extract(epoch from clock_timestamp() - started) * 1000)::int))::text || 'ms', true);
  select m.reaction_version into locked_version from private.messages m where m.id = t.message_id for update;
  if not found then
    perform private.reaction_ticket_fail('not_found', null);
  end if;
  if app_now() >= t.expires_at then
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
  version := locked_version;
  outcome := 'unchanged';
  if changed > 0 then
    update private.messages set reaction_version = reaction_version + 1, updated_at = app_now()
    where id = t.message_id returning reaction_version into version;
    outcome := case t.desired when 'present' then 'added' else 'removed' end;
  end if;
  insert into private.chat_reaction_operations as o
    (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, outcome,
     reaction_version, contract, ticket_id, ticket_expires_at)
  values (t.actor_id, t.operation_id, t.workspace_id, t.conversation_id, t.message_id, t.emoji,
          t.desired, outcome, version, 'ticket', t.id, t.expires_at)
  returning row_to_json(o) into receipt;
  return json_build_object('replayed', false, 'receipt', receipt,
                           'message', private.reaction_state(t.message_id));
end
$$;
