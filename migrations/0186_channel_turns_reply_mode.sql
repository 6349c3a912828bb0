-- Issue 34, found by the chaos run (chaos/replays/reply-mode-switch.json): a turn keeps the reply
-- mode its first run chose. Every generation of a turn answers with the turn's one Lark uuid; if a
-- later generation answered in the other mode (the operator switched `reply_mode` meanwhile),
-- Lark's uuid dedup would hand back the earlier message as if it were the new one (a text
-- recorded as the card's message, or a card's partial text taken for the whole answer). The
-- first run records its mode here; every later run of the turn reads it (workers/channel/reply.ts).
-- Additive: a nullable column, catalog only; older code never reads it (a turn an older host ran
-- has none and takes the installation's setting, as before).
set local lock_timeout = '5s';
set local statement_timeout = '60s';
alter table channel_turns
  add column if not exists reply_mode text check (reply_mode in ('text', 'card_stream'));
