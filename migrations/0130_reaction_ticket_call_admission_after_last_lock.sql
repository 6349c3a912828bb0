-- Issue 29 ("also still open from the audit"): a ticketed write read sign-out and membership
-- once, after the operation lock, and not again after the message lock, so a sign-out or a
-- removal from the conversation committed while the write waited on the message row did not
-- stop it. This version reads admission again after the last lock, in the statement that also
-- reads the fresh time for the last expiry check (the spec's "fresh database time after each
-- lock", applied to admission), with the same answers in the same order as step 1.
-- Unchanged otherwise: lock order, budgets, every other check and answer (migration 0115).
-- A retirement is not re-checked: it only ever removes a possible write (a fence), and it
-- answers before the message lock.
-- Replacing a function takes a short lock on it; bounded like every new migration.
set local lock_timeout = '5s';
set local statement_timeout = '30s';

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
  -- The ticket row plus `now_`, `prior` (its receipt as JSON) and the admission columns,
  -- read after the operation lock.
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
begin
  -- 1. The operation lock, then (its own statement) the ticket, its receipt, admission and
  --    fresh time.
  ignored := set_config('lock_timeout', greatest(1, least(p_lock_ms,
    p_budget_ms - floor(extract(epoch from clock_timestamp() - started) * 1000)::int))::text || 'ms', true);
  ignored := pg_advisory_xact_lock(720101, hashtext(p_actor || '/' || p_operation))::text;
  select tk.*, app_now() as now_,
         (select row_to_json(o) from private.chat_reaction_operations o
           where o.actor_id = p_actor and o.operation_id = p_operation) as prior,
         ad.found_actor, ad.signed_out_s, ad.member
    into t
    from private.reaction_tickets tk
    left join lateral (
      select true as found_actor, floor(extract(epoch from a.signed_out_at))::bigint as signed_out_s,
             exists (select 1 from private.messages m
                       join private.conversation_members cm
                         on cm.conversation_id = m.conversation_id and cm.actor_id = a.id
                      where m.id = tk.message_id) as member
        from private.actors a where a.id = p_actor) ad on true
   where tk.id = p_ticket;
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
  -- Admission, in reaction_admit's order.
  if t.found_actor is not true then
    perform private.reaction_ticket_fail('unauthorized/unknown_actor', null);
  end if;
  if t.signed_out_s is not null and (p_issued_at is null or p_issued_at < t.signed_out_s) then
    perform private.reaction_ticket_fail('unauthorized/signed_out', null);
  end if;
  if not t.member then
    perform private.reaction_ticket_fail('not_found', null);
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
  -- Admission again, in reaction_admit's order, with the fresh time of the same statement: a
  -- sign-out or a removal from the conversation committed while this waited on a lock stops
  -- it here, as a passed expiry does.
  select true as found_actor, floor(extract(epoch from a.signed_out_at))::bigint as signed_out_s,
         exists (select 1 from private.messages m
                   join private.conversation_members cm
                     on cm.conversation_id = m.conversation_id and cm.actor_id = a.id
                  where m.id = t.message_id) as member,
         app_now() as now_
    into adm
    from private.actors a where a.id = p_actor;
  if adm.found_actor is not true then
    perform private.reaction_ticket_fail('unauthorized/unknown_actor', null);
  end if;
  if adm.signed_out_s is not null and (p_issued_at is null or p_issued_at < adm.signed_out_s) then
    perform private.reaction_ticket_fail('unauthorized/signed_out', null);
  end if;
  if not adm.member then
    perform private.reaction_ticket_fail('not_found', null);
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
