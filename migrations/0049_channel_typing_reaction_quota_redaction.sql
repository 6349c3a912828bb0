-- Enforces the 1,000-slot pending quota on rows that predate it (spec "Retry and retention
-- limits": migration abandons/redacts pending rows beyond the quota). Per workspace, pending
-- rows (not cleaned, not abandoned) are ranked: rows already holding a slot first, then the
-- newest. Ranks beyond 1,000 are abandoned: snapshot erased, slot released, cleaned_at left
-- null (an explicit failed outcome, not a claim that the badge is gone). Kept rows without a
-- slot receive a free one, so every pending row is counted by the quota index again.
-- Only ledger rows change: inputs, turns and tasks are untouched. Idempotent.
with ranked as (
  select id, workspace_id, quota_slot,
         row_number() over (partition by workspace_id
                            order by (quota_slot is null), created_at desc, id) as rank
  from channel_typing_reaction
  where cleaned_at is null and abandoned_at is null
)
update channel_typing_reaction r
set abandoned_at = app_now(), credential_snapshot = null, quota_slot = null,
    next_attempt_at = null, retention_outcome = 'over_quota', updated_at = app_now()
from ranked
where r.id = ranked.id and ranked.rank > 1000;

with slotless as (
  select id, workspace_id,
         row_number() over (partition by workspace_id order by created_at desc, id) as n
  from channel_typing_reaction
  where cleaned_at is null and abandoned_at is null and quota_slot is null
), free as (
  select w.workspace_id, s as slot,
         row_number() over (partition by w.workspace_id order by s) as n
  from (select distinct workspace_id from slotless) w
  cross join generate_series(1, 1000) s
  where not exists (select 1 from channel_typing_reaction t
                    where t.workspace_id = w.workspace_id and t.quota_slot = s)
)
update channel_typing_reaction r
set quota_slot = free.slot, updated_at = app_now()
from slotless join free using (workspace_id, n)
where r.id = slotless.id;
