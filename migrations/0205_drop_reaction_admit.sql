-- After the baseline (issue 32 item 1): admission is private.reaction_admission
-- (migrations/functions/reaction_tickets.sql), read by the ticketed write after each of its
-- locks and by every other route (workers/reaction-tickets/directory.ts). 0110's
-- private.reaction_admit has no caller left: only the contract's own function called it (its
-- forgotten-ticket path), and the definition in the database is today's, which does not; no
-- release's TypeScript calls it directly, so dropping it breaks no running version.
-- And 0190's `not valid` check on inputs' `unanswered`, validated: the column was new then,
-- so every row satisfies it; the scan takes only a SHARE UPDATE EXCLUSIVE lock.
set local lock_timeout = '5s';
set local statement_timeout = '60s';

drop function if exists private.reaction_admit(text, bigint, text);

alter table lark_inbound_messages validate constraint lark_inbound_messages_unanswered;
