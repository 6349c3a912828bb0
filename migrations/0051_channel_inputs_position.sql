-- migrate:no-transaction
-- Inputs of a session in order (turn settlement, inspection); unique as a position is.
create unique index concurrently if not exists lark_inbound_messages_session_position
  on lark_inbound_messages (session_id, position) where session_id is not null;
