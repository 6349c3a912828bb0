-- squawk-ignore-file prefer-bigint-over-int -- a TTL in seconds (bounded by the config's schema, years at most) never nears int4's limit
-- Issue 29 hole 4: raising REACTION_TICKET_TTL_SECONDS must never reopen an operation that was
-- judged (and possibly forgotten: ticket, receipt and fence deleted) under a shorter window.
--
-- The rule (docs/mobile-api.md "Admission window"): an operation stamped at S is admitted until
-- S + the SMALLEST window in force at any time since S (the one in force at S included, and the
-- configured one now). So a raise applies only to operations stamped after it, and a lowering
-- applies at once to every operation. Every new-ticket issuance records the window it runs
-- under when it differs from the latest recorded one (workers/reaction-tickets/tickets.ts); a
-- window nobody issued under never admitted anything, so it need not be recorded.
--
-- Seeded with the default (7 days) as in force since always: what deployments before this
-- migration ran with. One that had configured a longer window has operations stamped before
-- its first issuance after this migration judged with 7 days: the safe direction (a terminal
-- 410, never a late write).
set local lock_timeout = '5s';
set local statement_timeout = '30s';

create table if not exists private.reaction_ticket_windows (
  in_force_from timestamptz not null,
  ttl_seconds integer not null check (ttl_seconds > 0)
);

create index if not exists reaction_ticket_windows_from_idx
  on private.reaction_ticket_windows (in_force_from);

insert into private.reaction_ticket_windows (in_force_from, ttl_seconds)
select '-infinity', 604800
where not exists (select 1 from private.reaction_ticket_windows);
