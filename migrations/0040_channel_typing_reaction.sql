-- squawk-ignore-file prefer-bigint-over-int -- a quota slot (1..1000) and an attempts counter, not ids
-- The typing-reaction ledger (docs/typing-ledger.md, spec lark-typing-reaction-cleanup).
-- One row per incoming user message that may carry this app's `Typing` badge, written in
-- the webhook's transaction BEFORE the Add is sent. No foreign keys and no cascades: a row
-- must outlive its session and its installation so the badge can still be withdrawn with
-- the row's own sealed credential snapshot.
create table channel_typing_reaction (
  -- Allocated by the registrar so the snapshot can be sealed bound to it before insert.
  id text primary key,
  workspace_id text not null,
  installation_id text not null,
  -- The installation's App ID: sweeps delete only operator_type 'app' with this operator_id.
  app_id text not null,
  -- The conversation (actor instance / session key) and the input's place in it.
  session_id text not null,
  source_message_id text not null,
  chat_id text,
  input_position bigint not null,
  context_revision bigint not null,
  message_created_at timestamptz,
  -- Sealed JSON {appId, appSecret, apiBase}, bound to `channel_typing_reaction:<id>:credentials`.
  -- Erased (null) in the same statement that records cleaned_at or abandoned_at.
  credential_snapshot text,
  -- Per-workspace pending slot 1..1000, arbitrated by a unique partial index (0041);
  -- released (null) when the row reaches a terminal outcome.
  quota_slot integer check (quota_slot between 1 and 1000),
  -- The Add. pending: registered, result unknown (in flight or crashed before recording);
  -- uncertain: timed out or response lost; added: reaction_id known; not_added: nothing to
  -- withdraw (rejected, message gone, or skipped because the input was already settled).
  add_state text not null default 'pending'
    check (add_state in ('pending', 'uncertain', 'added', 'not_added')),
  reaction_id text,
  add_finished_at timestamptz,
  -- Taskless settlement flag: true while no turn (task) has claimed the input (a debounce
  -- may still be pending in memory); a settlement without a task keeps it true.
  taskless boolean not null default true,
  -- Cleanup ownership: set once (never cleared) when termination is observed. An Add result
  -- recorded later cannot make the row active again.
  settled_at timestamptz,
  settled_by text,
  settle_outcome text,
  -- Terminal outcomes: cleaned_at = badge confirmed gone; abandoned_at = gave up (expiry),
  -- an explicit failed outcome that does not claim the badge disappeared.
  cleaned_at timestamptz,
  abandoned_at timestamptz,
  -- Retry bookkeeping for the maintenance passes: claims, not HTTP attempts.
  attempts integer not null default 0,
  next_attempt_at timestamptz,
  last_error text,
  -- Seven-day maximum lifetime from registration (spec "Retry and retention limits").
  expires_at timestamptz not null,
  created_at timestamptz not null default app_now(),
  updated_at timestamptz not null default app_now(),
  check (cleaned_at is null or abandoned_at is null),
  check (credential_snapshot is null or (cleaned_at is null and abandoned_at is null))
);

-- Settlement cutoffs: a terminal turn (or a failed flush's taskless settlement) covers every
-- input of its session up to cutoff_position in context_revision. Kept so a registration
-- that commits AFTER the settlement is born settled (no Add). No foreign keys.
create table channel_typing_settlement (
  session_id text not null,
  context_revision bigint not null,
  cutoff_position bigint not null,
  settled_by text not null,
  outcome text not null,
  taskless boolean not null,
  created_at timestamptz not null default app_now(),
  primary key (session_id, context_revision, cutoff_position)
);
