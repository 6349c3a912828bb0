import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, URL } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type Bundles, buildBundles } from '../../../chaos/runtime';
import { SECRETS } from '../../../chaos/world';
import { buildDelivery, messageReceivePayload } from '../../../emulator/events';
import { type LarkEmulator, startLarkEmulator } from '../../../emulator/server';
import type { AppRecord } from '../../../emulator/state';
import { type Bridge, startBridge } from '../../../scripts/lib/bridge';
import { migrate } from '../../../scripts/lib/migrator';
import { adminQuery, withDatabase } from '../../../scripts/lib/postgres';
import { type ReleaseTree, releaseTree } from '../../../scripts/lib/previous-release';
import { signActorToken } from '../../../workers/auth/sign';
import {
  setMembers,
  upsertActor,
  upsertConversation,
  upsertMessage,
  upsertWorkspace,
} from '../../../workers/reaction-tickets/directory';
import { mintOperationId } from '../../../workers/reaction-tickets/operation-id';
import type { Queryable } from '../../../workers/reaction-tickets/types';
import { MIGRATIONS_DIR } from '../../setup/stack';
import { type MixedRuntime, type Release, startMixedRuntime } from './mixed-runtime';

/**
 * Issue 31 item 2: the previous release (scripts/previous-release.json) and this tree, side by
 * side on one database migrated to THIS tree's schema, as a gradual deployment runs them: the
 * old code keeps working on the new schema, and each reads what the other wrote. Through the
 * deploy bundles in Miniflare (chaos/runtime.ts builds them), with the Lark emulator.
 */
const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const adminUrl = inject('adminUrl');
const database = `rl_rollout_${Date.now().toString(36)}`;

let tree: ReleaseTree;
let bundles: Record<Release, Bundles>;
let lark: LarkEmulator;
let bridge: Bridge;
let runtime: MixedRuntime;
let db: pg.Pool;
let persistDir: string;
const agents: Server[] = [];
const logs: { release: string; line: Record<string, unknown> }[] = [];

/** An HTTP agent (workers/agents/http.ts) that answers every turn with the release it serves. */
async function releaseAgent(release: Release): Promise<Record<string, string>> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ text: `answered by the ${release} release` }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  agents.push(server);
  return {
    AGENT_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    AGENT_SIGNING_SECRET: `rollout-agent-secret-${release}-0123456789`,
  };
}

beforeAll(async () => {
  tree = await releaseTree();
  const [current, previous] = await Promise.all([buildBundles(ROOT), buildBundles(tree.root)]);
  bundles = { new: current, old: previous };
  await adminQuery(adminUrl, `create database ${database}`);
  const url = withDatabase(adminUrl, database);
  // The new schema: this tree's migrations, all of them. The old code runs on it.
  await migrate(url, { dir: MIGRATIONS_DIR });
  db = new pg.Pool({ connectionString: url, max: 2 });
  lark = await startLarkEmulator({ rateLimits: false });
  bridge = await startBridge();
  persistDir = await mkdtemp(join(tmpdir(), 'reaction-ledger-rollout-'));
  const dbVars = { DATABASE_URL: url, NEON_WS_PROXY: `127.0.0.1:${bridge.port}/v2` };
  runtime = await startMixedRuntime({
    // Each release's ActorHost asks its own agent, whose answer names the release: which reply
    // arrives tells which release's host ran the turn, whatever the two releases can do.
    releaseVars: { new: await releaseAgent('new'), old: await releaseAgent('old') },
    bundles,
    vars: {
      ...SECRETS,
      ...dbVars,
      LARK_API_BASE: lark.url,
      LOG_LEVEL: 'warn',
      CHANNEL_DEBOUNCE_MS: '200',
      DO_ALARMS: 'auto',
    },
    retentionVars: { ...dbVars, LOG_LEVEL: 'warn' },
    persistDir,
    onLog: (text) => {
      try {
        const line = JSON.parse(text) as Record<string, unknown>;
        logs.push({ release: '?', line });
      } catch {
        // By design: workerd's own lines (not JSON) are not the service's log.
      }
    },
  });
}, 180_000);

afterAll(async () => {
  await runtime?.dispose();
  for (const a of agents) a.close();
  await lark?.close();
  await bridge?.close();
  await db?.end();
  await adminQuery(adminUrl, `drop database if exists ${database} with (force)`);
  await tree?.remove();
  if (persistDir) await rm(persistDir, { recursive: true, force: true });
});

/** Waits for an observable condition, never a fixed time. */
async function until<T>(
  what: string,
  read: () => T | Promise<T>,
  ok: (v: T) => boolean,
  ms = 30_000,
): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const json = (body: unknown, headers: Record<string, string> = {}) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});
const asAdmin = { authorization: `Bearer ${SECRETS.ADMIN_TOKEN}` };

async function install(via: Release): Promise<{ id: string; app: AppRecord }> {
  const app = lark.state.registerApp({
    app_id: `cli_rollout${randomBytes(4).toString('hex')}`,
    app_secret: randomBytes(12).toString('hex'),
    verification_token: randomBytes(12).toString('hex'),
    encrypt_key: randomBytes(12).toString('hex'),
  });
  const res = await runtime.fetch(
    via,
    '/admin/lark/installations',
    json(
      {
        workspace_id: `ws_${via}_${randomBytes(3).toString('hex')}`,
        app_id: app.app_id,
        app_secret: app.app_secret,
        verification_token: app.verification_token,
        encrypt_key: app.encrypt_key,
      },
      asAdmin,
    ),
  );
  expect(res.status, await res.clone().text()).toBe(201);
  const id = ((await res.json()) as { installation: { id: string } }).installation.id;
  return { id, app };
}

/** A user's group message delivered to one release's webhook; resolves when it is answered. */
async function say(via: Release, inst: { id: string; app: AppRecord }, chat: string, text: string) {
  const msg = lark.state.createMessage({
    chat_id: chat,
    chat_type: 'group',
    text,
    sender: { id: 'ou_rollout_user', id_type: 'open_id', sender_type: 'user' },
  });
  const request = buildDelivery(
    inst.app,
    messageReceivePayload(inst.app, msg, lark.state.now()),
    lark.state.now(),
  );
  const res = await runtime.fetch(via, `/lark/events/${inst.id}`, {
    method: 'POST',
    headers: request.headers,
    body: request.body,
  });
  expect(res.status).toBe(200);
  return msg.message_id;
}

const typingOn = (messageId: string) =>
  (lark.state.reactions.get(messageId) ?? []).filter((r) => r.reaction_type.emoji_type === 'Typing').length;

async function repliedOnce(messageId: string) {
  const replies = await until(
    'the reply',
    () => lark.state.repliesTo(messageId),
    (r) => r.length > 0,
  );
  await until(
    'the badge withdrawn',
    () => typingOn(messageId),
    (n) => n === 0,
  );
  expect(lark.state.repliesTo(messageId)).toHaveLength(1);
  return replies[0]!;
}

const errors = () =>
  logs
    .filter((l) => l.line.level === 'error')
    .map((l) => `${l.line.event}: ${JSON.stringify(l.line.error ?? '')}`);

describe('two versions against one database (issue 31 item 2)', { timeout: 120_000 }, () => {
  it('rollout.old_webhook_new_host: an event taken by the old webhook is answered once by a new ActorHost', async () => {
    const inst = await install('old');
    const anchor = await say('old', inst, 'oc_rollout_old_to_new', 'hello from the old webhook');
    const reply = await repliedOnce(anchor);
    // The new ActorHost ran the turn the old webhook recorded.
    expect(JSON.parse(reply.content)).toEqual({ text: 'answered by the new release' });
    const { rows } = await db.query(`select outcome from channel_turns where anchor_message_id = $1`, [
      anchor,
    ]);
    expect(rows).toEqual([{ outcome: 'delivered' }]);
    expect(errors()).toEqual([]);
  });

  it('rollout.new_webhook_old_host: an event taken by the new webhook is answered once by an old ActorHost', async () => {
    const inst = await install('new');
    const anchor = await say('new', inst, 'oc_rollout_new_to_old', 'hello from the new webhook');
    const reply = await repliedOnce(anchor);
    // The old ActorHost ran the turn the new webhook recorded.
    expect(JSON.parse(reply.content)).toEqual({ text: 'answered by the old release' });
    expect(errors()).toEqual([]);
  });

  it('rollout.both_crons: old and new minute passes (maintenance, recovery, housekeeping) and hourly cleanups run on the shared rows', async () => {
    for (const release of ['old', 'new', 'old'] as const) {
      expect(await runtime.minuteCron(release)).toBe('ok');
      expect(await runtime.hourlyCron(release)).toBe('ok');
    }
    const { rows } = await db.query<{ n: number }>(`select count(*)::int as n from typing_maintenance_runs`);
    expect(rows[0]!.n).toBeGreaterThan(0);
    expect(errors()).toEqual([]);
  });

  it('rollout.tickets_cross: a ticket issued by one release is honoured by the other, both ways', async () => {
    const client = await db.connect();
    try {
      const q = client as unknown as Queryable;
      await client.query('begin');
      await upsertWorkspace(q, { id: 'rollout-ws', name: 'rollout' });
      await upsertActor(q, { id: 'rollout-a', workspaceId: 'rollout-ws', displayName: 'a' });
      await upsertConversation(q, { id: 'rollout-conv', workspaceId: 'rollout-ws', title: 'rollout' });
      await setMembers(q, 'rollout-conv', ['rollout-a'], []);
      for (const m of ['rollout-m0', 'rollout-m1'])
        await upsertMessage(q, {
          id: m,
          conversationId: 'rollout-conv',
          authorActorId: 'rollout-a',
          body: m,
        });
      await client.query('commit');
    } finally {
      client.release();
    }
    const token = await signActorToken(SECRETS.ACTOR_JWT_SECRET, 'rollout-a', { ttlSeconds: 3600 });
    const bearer = { authorization: `Bearer ${token}` };
    const now = async () =>
      Number(
        (await db.query<{ ms: string }>(`select (extract(epoch from app_now()) * 1000)::bigint as ms`))
          .rows[0]!.ms,
      );
    for (const [issuer, writer, messageId] of [
      ['old', 'new', 'rollout-m0'],
      ['new', 'old', 'rollout-m1'],
    ] as const) {
      const operationId = mintOperationId(await now());
      const body = { operationId, messageId, emoji: '👍', desired: 'present' };
      const issued = await runtime.fetch(issuer, '/v1/reaction-tickets', json(body, bearer));
      expect(issued.status, await issued.clone().text()).toBe(201);
      const { ticket } = (await issued.json()) as { ticket: string };
      const put = await runtime.fetch(writer, `/v1/reaction-operations/${operationId}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', ...bearer },
        body: JSON.stringify({ ticket, messageId, emoji: '👍', desired: 'present' }),
      });
      expect(put.status, `${issuer} ticket, ${writer} write: ${await put.clone().text()}`).toBe(200);
    }
    expect(errors()).toEqual([]);
  });
});
