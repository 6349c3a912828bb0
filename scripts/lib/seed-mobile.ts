import pg from 'pg';
import { signActorToken } from '../../workers/auth/sign';
import {
  setMembers,
  upsertActor,
  upsertConversation,
  upsertMessage,
  upsertWorkspace,
} from '../../workers/reaction-tickets/directory';
import type { Queryable } from '../../workers/reaction-tickets/types';

/**
 * Seeds the mobile reaction demo (idempotent): workspace `demo`, actors `demo-alice` and
 * `demo-bob` in conversation `demo-conversation` with message `demo-message-1`, and returns
 * a 30-day HS256 bearer token for demo-alice signed with ACTOR_JWT_SECRET. Uses the same
 * directory functions as the /admin routes, over a direct node-postgres connection.
 */
export const DEMO = {
  workspaceId: 'demo',
  conversationId: 'demo-conversation',
  messageId: 'demo-message-1',
  actorId: 'demo-alice',
  otherActorId: 'demo-bob',
} as const;

export async function seedMobileDemo(
  databaseUrl: string,
  jwtSecret: string,
): Promise<{ conversationId: string; messageId: string; actorId: string; token: string }> {
  const client = new pg.Client({ connectionString: databaseUrl, statement_timeout: 5000 });
  await client.connect();
  try {
    const db = client as unknown as Queryable;
    await client.query('begin');
    await upsertWorkspace(db, { id: DEMO.workspaceId, name: 'Demo workspace' });
    await upsertActor(db, { id: DEMO.actorId, workspaceId: DEMO.workspaceId, displayName: 'Alice' });
    await upsertActor(db, { id: DEMO.otherActorId, workspaceId: DEMO.workspaceId, displayName: 'Bob' });
    await upsertConversation(db, { id: DEMO.conversationId, workspaceId: DEMO.workspaceId, title: 'Demo' });
    await setMembers(db, DEMO.conversationId, [DEMO.actorId, DEMO.otherActorId], []);
    await upsertMessage(db, {
      id: DEMO.messageId,
      conversationId: DEMO.conversationId,
      authorActorId: DEMO.otherActorId,
      body: 'React to me from the mobile API',
    });
    await client.query('commit');
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    throw err;
  } finally {
    await client.end();
  }
  const token = await signActorToken(jwtSecret, DEMO.actorId, { ttlSeconds: 30 * 86_400 });
  return { conversationId: DEMO.conversationId, messageId: DEMO.messageId, actorId: DEMO.actorId, token };
}
