import type { Pool } from '@neondatabase/serverless';
import { withTx } from '../../workers/db/tx';
import { mintOperationId } from '../../workers/reaction-tickets/operation-id';
import { issueTicket } from '../../workers/reaction-tickets/tickets';
import type { Desired, Queryable } from '../../workers/reaction-tickets/types';

/**
 * The ticket benches' world (bench/suites/30-tickets.ts and the probes beside it): one
 * workspace, `actors` members of one conversation, one hot message and one message per actor.
 */
export interface TicketWorld {
  workspaceId: string;
  conversationId: string;
  actors: string[];
  hot: string;
  spread: string[];
}

export async function seedTicketWorld(
  db: Pool,
  workspaceId: string,
  actorCount: number,
): Promise<TicketWorld> {
  const actors = Array.from({ length: actorCount }, (_, i) => `${workspaceId}_a${i}`);
  const spread = actors.map((_, i) => `${workspaceId}_m${i}`);
  const hot = `${workspaceId}_hot`;
  const conversationId = `${workspaceId}_c`;
  await db.query('insert into private.workspaces (id) values ($1)', [workspaceId]);
  await db.query('insert into private.actors (id, workspace_id) select unnest($1::text[]), $2', [
    actors,
    workspaceId,
  ]);
  await db.query('insert into private.conversations (id, workspace_id) values ($1, $2)', [
    conversationId,
    workspaceId,
  ]);
  await db.query(
    'insert into private.conversation_members (conversation_id, actor_id) select $1, unnest($2::text[])',
    [conversationId, actors],
  );
  await db.query(
    'insert into private.messages (id, workspace_id, conversation_id) select unnest($1::text[]), $2, $3',
    [[hot, ...spread], workspaceId, conversationId],
  );
  return { workspaceId, conversationId, actors, hot, spread };
}

/** Each actor alternates present/absent, so every write really changes a row. */
export const desiredAt = (i: number): Desired => (i % 2 === 0 ? 'present' : 'absent');

/** `ops` tickets per actor for 👍 on messageOf(actor), issued before any timed phase. */
export async function issueTickets(
  pool: Pool,
  world: TicketWorld,
  messageOf: (actor: number) => string,
  ops: number,
  maxOutstanding = ops,
): Promise<{ id: string; operationId: string }[][]> {
  const tx = { budgetMs: 10_000, lockTimeoutMs: 10_000 };
  const tickets: { id: string; operationId: string }[][] = world.actors.map(() => []);
  await Promise.all(
    world.actors.map(async (actorId, a) => {
      for (let i = 0; i < ops; i++) {
        // The ticket contract's operation IDs are UUIDv7 stamped at the choice (issue 15).
        const operationId = mintOperationId(Date.now());
        const { ticket } = await withTx(pool, tx, (c) =>
          issueTicket(c as unknown as Queryable, {
            actorId,
            operationId,
            intent: { messageId: messageOf(a), emoji: '👍', desired: desiredAt(i) },
            admission: { workspaceId: world.workspaceId, conversationId: world.conversationId },
            ttlSeconds: 7 * 86_400,
            keyVersion: '1',
            maxOutstanding,
          }),
        );
        tickets[a]!.push({ id: ticket.id, operationId });
      }
    }),
  );
  return tickets;
}

/** The baseline every ticket bench compares with: one statement, no lock, no receipt. */
export const BARE_UPSERT = `
  insert into private.message_reactions (message_id, actor_id, emoji) values ($1, $2, $3)
  on conflict (message_id, actor_id, emoji) do update set created_at = app_now()`;
