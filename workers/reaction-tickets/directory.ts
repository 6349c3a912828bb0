import { sqlState } from '../db/tx';
import { AppError } from '../errors';
import { CONTRACT_ANSWERS } from './contract-answers';
import type { Queryable } from './types';

/**
 * The chat directory the platform upserts through /admin: workspaces, actors,
 * conversations, members and messages. Upserts are idempotent; a row never moves to
 * another workspace or conversation (that would re-home its receipts), so a conflicting
 * parent is refused with 409, and an id that names no row (a foreign-key violation, 23503)
 * with 422 `unknown_reference`: the statement wrote nothing.
 */
export async function upsertWorkspace(db: Queryable, w: { id: string; name?: string }): Promise<void> {
  await db.query(
    `insert into private.workspaces (id, name) values ($1, coalesce($2, ''))
     on conflict (id) do update set name = coalesce($2, private.workspaces.name), updated_at = app_now()`,
    [w.id, w.name ?? null],
  );
}

/** The request field behind each foreign key an upsert's input ids are checked by. */
const REFERENCED_BY: Record<string, string> = {
  actors_workspace_id_fkey: 'workspaceId',
  conversations_workspace_id_fkey: 'workspaceId',
  messages_author_actor_id_fkey: 'authorActorId',
};

async function upsertChild(db: Queryable, sql: string, params: unknown[], what: string): Promise<void> {
  const { rowCount } = await db.query(sql, params).catch((err: unknown) => {
    if (sqlState(err) !== '23503') throw err;
    const field = REFERENCED_BY[String((err as { constraint?: unknown }).constraint)];
    throw new AppError(
      'unknown_reference',
      field ? `${field} names nothing that exists` : 'A referenced id names nothing that exists',
      field ? [{ path: [field] }] : undefined,
    );
  });
  if (!rowCount) throw new AppError('conflict', `${what} exists under another parent`);
}

/**
 * An upsert of a row that belongs to a workspace and carries one text column (an actor's
 * display name, a conversation's title): $1 id, $2 workspace, $3 the text (null keeps it). A
 * row under another workspace is not updated, so no row comes back (409 in upsertChild). Only
 * the fixed table and column names are interpolated.
 */
function workspaceChildUpsert(table: string, text: string): string {
  return `insert into ${table} (id, workspace_id, ${text}) values ($1, $2, coalesce($3, ''))
     on conflict (id) do update set ${text} = coalesce($3, ${table}.${text}), updated_at = app_now()
     where ${table}.workspace_id = excluded.workspace_id`;
}

const UPSERT_ACTOR_SQL = workspaceChildUpsert('private.actors', 'display_name');
const UPSERT_CONVERSATION_SQL = workspaceChildUpsert('private.conversations', 'title');

export async function upsertActor(
  db: Queryable,
  a: { id: string; workspaceId: string; displayName?: string },
): Promise<void> {
  await upsertChild(db, UPSERT_ACTOR_SQL, [a.id, a.workspaceId, a.displayName ?? null], 'actor');
}

export async function upsertConversation(
  db: Queryable,
  c: { id: string; workspaceId: string; title?: string },
): Promise<void> {
  await upsertChild(db, UPSERT_CONVERSATION_SQL, [c.id, c.workspaceId, c.title ?? null], 'conversation');
}

/** Sets the member list delta: adds `add`, removes `remove`. Actors must share the workspace. */
export async function setMembers(
  db: Queryable,
  conversationId: string,
  add: string[],
  remove: string[],
): Promise<{ added: number; removed: number }> {
  const added = await db.query(
    `insert into private.conversation_members (conversation_id, actor_id)
     select c.id, a.id from private.conversations c
     join private.actors a on a.workspace_id = c.workspace_id and a.id = any($2::text[])
     where c.id = $1
     on conflict do nothing`,
    [conversationId, add],
  );
  const removed = await db.query(
    'delete from private.conversation_members where conversation_id = $1 and actor_id = any($2::text[])',
    [conversationId, remove],
  );
  return { added: added.rowCount ?? 0, removed: removed.rowCount ?? 0 };
}

export async function upsertMessage(
  db: Queryable,
  m: { id: string; conversationId: string; authorActorId?: string; body?: string },
): Promise<void> {
  await upsertChild(
    db,
    `insert into private.messages (id, workspace_id, conversation_id, author_actor_id, body)
     select $1, c.workspace_id, c.id, $3, coalesce($4, '') from private.conversations c where c.id = $2
     on conflict (id) do update set body = coalesce($4, private.messages.body), updated_at = app_now()
     where private.messages.conversation_id = excluded.conversation_id`,
    [m.id, m.conversationId, m.authorActorId ?? null, m.body ?? null],
    'message (or its conversation is unknown)',
  );
}

/** Sign-out: every bearer token issued before now is refused from here on. */
export async function signOutActor(db: Queryable, actorId: string): Promise<Date | null> {
  const { rows } = await db.query<{ signed_out_at: Date }>(
    'update private.actors set signed_out_at = app_now(), updated_at = app_now() where id = $1 returning signed_out_at',
    [actorId],
  );
  return rows[0]?.signed_out_at ?? null;
}

export interface Admission {
  workspaceId: string;
  conversationId: string;
}

/**
 * Admission, checked on every call: the actor exists, its token was issued after its last
 * sign-out (second precision, as JWT `iat` is), and, with a message, it is a member of the
 * message's conversation. The rule is the SQL function private.reaction_admission
 * (migrations/functions/reaction_tickets.sql), the same one the ticketed write reads after
 * each of its locks; its refusal keys become answers through CONTRACT_ANSWERS: unknown actor
 * or revoked session is 401, a missing message and a non-member look the same (404), so
 * existence never leaks.
 */
async function admit(
  db: Queryable,
  actorId: string,
  issuedAt: number | undefined,
  messageId: string | null,
): Promise<{ workspaceId: string | null; conversationId: string | null }> {
  const { rows } = await db.query<{
    refused: string | null;
    workspace_id: string | null;
    conversation_id: string | null;
  }>('select refused, workspace_id, conversation_id from private.reaction_admission($1, $2, $3)', [
    actorId,
    issuedAt ?? null,
    messageId,
  ]);
  const row = rows[0]!;
  if (row.refused !== null) {
    const answer = CONTRACT_ANSWERS[row.refused];
    // A key this module does not know is a mismatch between the SQL and the code: a 500.
    if (!answer) throw new AppError('internal_error', 'Unexpected reaction contract answer');
    throw new AppError(answer[0], answer[1]);
  }
  return { workspaceId: row.workspace_id, conversationId: row.conversation_id };
}

/** Admission to a message: its workspace and conversation once admitted. */
export async function admitToMessage(
  db: Queryable,
  actorId: string,
  issuedAt: number | undefined,
  messageId: string,
): Promise<Admission> {
  const a = await admit(db, actorId, issuedAt, messageId);
  return { workspaceId: a.workspaceId!, conversationId: a.conversationId! };
}

/** Admission without a message (retirement): the actor exists and is not signed out since. */
export async function admitActor(
  db: Queryable,
  actorId: string,
  issuedAt: number | undefined,
): Promise<void> {
  await admit(db, actorId, issuedAt, null);
}
