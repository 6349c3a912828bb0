import type { Desired, MessageReactions, Outcome, Queryable } from './types';

/**
 * The current reactions table (one row per message, actor and emoji). Every change runs
 * under the message row lock and bumps messages.reaction_version in the same statement
 * group, so the version names exactly one reaction state.
 */
const READ_SQL = `
  select m.reaction_version, r.emoji, r.actor_id
  from private.messages m
  left join private.message_reactions r on r.message_id = m.id
  where m.id = $1
  order by r.emoji, r.actor_id`;

export async function readReactions(client: Queryable, messageId: string): Promise<MessageReactions | null> {
  const { rows } = await client.query<{
    reaction_version: string;
    emoji: string | null;
    actor_id: string | null;
  }>(READ_SQL, [messageId]);
  if (rows.length === 0) return null;
  return groupReactions(messageId, Number(rows[0]!.reaction_version), rows);
}

/** Rows (ordered by emoji, actor) to the API shape; rows with a null emoji are skipped. */
export function groupReactions(
  messageId: string,
  reactionVersion: number,
  rows: { emoji: string | null; actor_id: string | null }[],
): MessageReactions {
  const byEmoji = new Map<string, string[]>();
  for (const row of rows) {
    if (row.emoji === null || row.actor_id === null) continue;
    const list = byEmoji.get(row.emoji) ?? [];
    list.push(row.actor_id);
    byEmoji.set(row.emoji, list);
  }
  return {
    messageId,
    reactionVersion,
    reactions: [...byEmoji].map(([emoji, actorIds]) => ({ emoji, count: actorIds.length, actorIds })),
  };
}

// One round trip: change the row, bump the version only when something changed.
const ADD_SQL = `
  with changed as (
    insert into private.message_reactions (message_id, actor_id, emoji) values ($1, $2, $3)
    on conflict do nothing returning 1
  )
  update private.messages set reaction_version = reaction_version + 1, updated_at = app_now()
  where id = $1 and exists (select 1 from changed)
  returning reaction_version`;

const REMOVE_SQL = `
  with changed as (
    delete from private.message_reactions where message_id = $1 and actor_id = $2 and emoji = $3
    returning 1
  )
  update private.messages set reaction_version = reaction_version + 1, updated_at = app_now()
  where id = $1 and exists (select 1 from changed)
  returning reaction_version`;

/**
 * Applies a desired state. The caller holds the message lock and passes the version it read
 * under it; the result is the outcome and the version after the change.
 */
export async function applyDesired(
  client: Queryable,
  messageId: string,
  actorId: string,
  emoji: string,
  desired: Desired,
  lockedVersion: number,
): Promise<{ outcome: Outcome; version: number }> {
  const { rows } = await client.query<{ reaction_version: string }>(
    desired === 'present' ? ADD_SQL : REMOVE_SQL,
    [messageId, actorId, emoji],
  );
  if (rows.length === 0) return { outcome: 'unchanged', version: lockedVersion };
  return { outcome: desired === 'present' ? 'added' : 'removed', version: Number(rows[0]!.reaction_version) };
}

/** The web toggle: flips one reaction under the message lock. No receipt, no ticket. */
export async function toggleReaction(
  client: Queryable,
  messageId: string,
  actorId: string,
  emoji: string,
  lockedVersion: number,
): Promise<{ outcome: Outcome; version: number }> {
  const { rows } = await client.query(
    'select 1 from private.message_reactions where message_id = $1 and actor_id = $2 and emoji = $3',
    [messageId, actorId, emoji],
  );
  return applyDesired(
    client,
    messageId,
    actorId,
    emoji,
    rows.length > 0 ? 'absent' : 'present',
    lockedVersion,
  );
}
