-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- Issue 16, items 2 and 3.
--
-- One Lark app, one installation. The service authenticates as a self-built app
-- (tenant_access_token/internal), and a self-built app lives in exactly one tenant, so the
-- same app_id under two installations is always a mistake, and it let a signed delivery for
-- one be replayed to the other and processed twice. The key is app_id alone: api_base is
-- operator input, so (app_id, api_base) would let the same app in again under another
-- spelling of a host. docs/lark.md has the reasoning (and what a marketplace app would need).
do $$
declare
  dups text;
begin
  select string_agg(app_id, ', ' order by app_id) into dups
  from (select app_id from lark_installations group by app_id having count(*) > 1) d;
  if dups is not null then
    raise exception 'lark_installations holds these apps more than once: %. Keep one installation per app (DELETE /admin/lark/installations/:id) and migrate again', dups;
  end if;
end $$;

-- squawk-ignore require-concurrent-index-creation -- one row per installed Lark app: the build is instant, and it must share the transaction of the duplicate check above
create unique index lark_installations_app on lark_installations (app_id);
-- Implied by the index above.
-- squawk-ignore require-concurrent-index-deletion -- the same tiny table, in the same transaction as the index that replaces it
drop index lark_installations_workspace_app;

-- A verified delivery whose content Postgres cannot store (U+0000, a lone surrogate) is
-- acknowledged, so Lark stops redelivering it, and its receipt says it was rejected. The
-- receipt still dedupes the redeliveries and is pruned with the others after 24 h.
alter table lark_event_receipts
  add column status text not null default 'accepted' check (status in ('accepted', 'rejected'));
