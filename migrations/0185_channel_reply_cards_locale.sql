-- Issue 34: a card's language, recorded with the card (the turn's, from its inputs' script), so
-- the minute sweep that finishes a card left streaming (workers/channel/card-sweep.ts) writes the
-- interrupted notice in it without the settlement's arguments.
-- Additive: a column with a constant default is a catalog-only change; older code never reads it.
set local lock_timeout = '5s';
set local statement_timeout = '60s';
alter table channel_reply_cards
  add column if not exists locale text not null default 'en' check (locale in ('en', 'vi', 'zh'));
