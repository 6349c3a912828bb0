-- squawk-ignore-file require-lock-timeout, require-statement-timeout -- applied before the migration linter (issue 30), its SQL fixed: it ran under the runner's session timeouts (scripts/lib/migrator.ts); new migrations set their own
-- A recovery binding must outlive its effect (effect-recovery.md: "polling revisits stopped
-- owners until each effect's own grace expires"). A binding's lifetime, expires_at_ms -
-- created_at_ms, is counted from the later of its emit and its effect's end: while the effect
-- is pending or processing the binding always lives, and after the effect is retired or
-- finished it lives one more lifetime, so a check can still report the outcome. Both the
-- pruning and the check admission ask this one function.
create function effect_binding_live(r effect_recoveries, now_ms bigint) returns boolean
language sql stable parallel safe as $$
  select r.expires_at_ms >= now_ms
      -- coalesce: a never-retired binding must read false here, not null (`not null` is null).
      or coalesce(r.retired_at_ms + (r.expires_at_ms - r.created_at_ms) >= now_ms, false)
      or exists (
           select 1 from effects e
            where e.id = r.effect_id
              and (e.status in ('pending', 'processing')
                   or coalesce(e.finished_at_ms + (r.expires_at_ms - r.created_at_ms) >= now_ms, false)))
$$;
