import { Hono } from 'hono';
import { z } from 'zod';
import type { AppEnv } from '../context';
import { AppError } from '../errors';
import { readJsonBody } from '../lib/json-body';
import { pgText } from '../lib/pg-text';
import { requireAdmin } from '../middleware';
import { runReactionTx } from './budget';
import { closeLegacyContract, getLegacyContractStatus } from './contract';
import {
  setMembers,
  signOutActor,
  upsertActor,
  upsertConversation,
  upsertMessage,
  upsertWorkspace,
} from './directory';

/**
 * Admin routes the chat platform uses to upsert its directory (workspaces, actors,
 * conversations, members, messages) and end an actor's sessions, mounted at /admin; and the
 * legacy write contract, mounted at /admin/reaction-contract. Like every admin sub-app, each
 * applies requireAdmin() to all its paths; the directory does it per resource prefix, so its
 * guard never covers other features' /admin paths.
 */
const Id = z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/);
const Ids = z.array(Id).max(500);

/** The directory routes' bodies (also in the admin API's OpenAPI document, workers/admin/openapi.ts). */
export const DirectoryBodies = {
  workspace: z.object({ name: pgText().max(200).optional() }).strict(),
  actor: z.object({ workspaceId: Id, displayName: pgText().max(200).optional() }).strict(),
  conversation: z.object({ workspaceId: Id, title: pgText().max(500).optional() }).strict(),
  members: z.object({ add: Ids.default([]), remove: Ids.default([]) }).strict(),
  message: z
    .object({ conversationId: Id, authorActorId: Id.optional(), body: pgText().max(20_000).optional() })
    .strict(),
};
const B = DirectoryBodies;

function id(raw: string): string {
  const parsed = Id.safeParse(raw);
  if (!parsed.success) throw new AppError('validation_failed', 'Malformed ID');
  return parsed.data;
}

/** A directory resource's routes: every one of them takes the admin token. */
const guarded = () => new Hono<AppEnv>().use('*', requireAdmin());

export const directoryAdmin = new Hono<AppEnv>()
  .route(
    '/workspaces',
    guarded().put('/:id', async (c) => {
      const b = await readJsonBody(c, B.workspace);
      await upsertWorkspace(c.var.db(), { id: id(c.req.param('id')), name: b.name });
      return c.json({ ok: true });
    }),
  )
  .route(
    '/actors',
    guarded()
      .put('/:id', async (c) => {
        const b = await readJsonBody(c, B.actor);
        await upsertActor(c.var.db(), { id: id(c.req.param('id')), ...b });
        return c.json({ ok: true });
      })
      .post('/:id/sign-out', async (c) => {
        const at = await signOutActor(c.var.db(), id(c.req.param('id')));
        if (!at) throw new AppError('not_found', 'Actor not found');
        return c.json({ signedOutAt: new Date(at).toISOString() });
      }),
  )
  .route(
    '/conversations',
    guarded()
      .put('/:id', async (c) => {
        const b = await readJsonBody(c, B.conversation);
        await upsertConversation(c.var.db(), { id: id(c.req.param('id')), ...b });
        return c.json({ ok: true });
      })
      .post('/:id/members', async (c) => {
        const b = await readJsonBody(c, B.members);
        return c.json(await setMembers(c.var.db(), id(c.req.param('id')), b.add, b.remove));
      }),
  )
  .route(
    '/messages',
    guarded().put('/:id', async (c) => {
      const b = await readJsonBody(c, B.message);
      await upsertMessage(c.var.db(), { id: id(c.req.param('id')), ...b });
      return c.json({ ok: true });
    }),
  );

export const legacyContractAdmin = guarded()
  .get('/', async (c) => c.json(await getLegacyContractStatus(c.var.db())))
  .post('/legacy/close', async (c) => {
    const status = await runReactionTx(c.var.db(), c.var.config, (client) =>
      closeLegacyContract(client, `admin:${c.var.requestId}`),
    );
    return c.json(status);
  });
