import { env } from 'cloudflare:workers';
import fc from 'fast-check';
import { beforeAll, describe, it } from 'vitest';
import { app } from '../../workers/app';
import { uid } from '../helpers/db';
import { installApp, type TestApp } from '../lark/helpers';
import { seedWorld, type World } from '../reaction-tickets/helpers';
import {
  bodyBytes,
  contentType,
  type FuzzCase,
  fuzzPool,
  itFuzzes,
  nastyJson,
  nastyNumber,
  nastySegment,
  nastyString,
  workerSecrets,
} from './harness';

/**
 * Every /admin route, read from the app's own route table (a new route is fuzzed without
 * editing this file), with path ids that exist or are hostile, bodies built from the fields
 * the admin API knows (and junk), and every form of the admin token.
 */
const pool = fuzzPool();

interface Route {
  method: string;
  path: string;
}

function adminRoutes(): Route[] {
  const seen = new Map<string, Route>();
  for (const r of app.routes)
    if (r.path.startsWith('/admin') && r.method !== 'ALL' && !r.path.endsWith('*'))
      seen.set(`${r.method} ${r.path}`, { method: r.method, path: r.path });
  return [...seen.values()];
}

let world: World;
let lark: TestApp;
beforeAll(async () => {
  world = await seedWorld(2, 2);
  lark = await installApp();
}, 60_000);

/** Ids that exist, fresh ones, and hostile ones. */
const ids = () =>
  fc.oneof(
    fc.constantFrom(
      world.workspaceId,
      world.conversationId,
      world.actors[0]!,
      world.outsider,
      world.messages[0]!,
      lark.installationId,
    ),
    fc.constant(null).map(() => uid('fz')),
    nastyString,
  );

/** The fields the admin bodies know, with values that fit, nearly fit, or do not. */
const FIELDS = [
  'name',
  'workspaceId',
  'displayName',
  'title',
  'conversationId',
  'authorActorId',
  'body',
  'add',
  'remove',
  'workspace_id',
  'app_id',
  'app_secret',
  'verification_token',
  'encrypt_key',
  'api_base',
  'dbBatchBudget',
  'workerOpBudget',
  'generation',
  'dbBatchSize',
] as const;

const fieldValue = () =>
  fc.oneof(
    ids(),
    fc.array(ids(), { maxLength: 5 }),
    fc.constantFrom('lark', 'feishu', 'https://open.larksuite.com', 'http://127.0.0.1:1', 'ftp://x'),
    fc.string({ minLength: 1, maxLength: 12 }).map((s) => `cli_${s.replace(/[^A-Za-z0-9]/g, 'a')}`),
    fc.integer({ min: -5, max: 200_000 }),
    nastyNumber,
    nastyJson,
  );

const adminBody = () =>
  fc.oneof(
    { weight: 5, arbitrary: fc.dictionary(fc.constantFrom(...FIELDS), fieldValue(), { maxKeys: 5 }) },
    { weight: 1, arbitrary: nastyJson },
  );

const authorization = fc.oneof(
  { weight: 8, arbitrary: fc.constant(`Bearer ${env.ADMIN_TOKEN}`) },
  // The retention routes' own credential: enable's numbers reach SQL only with it.
  { weight: 2, arbitrary: fc.constant(`Bearer ${env.RETENTION_ADMIN_TOKEN}`) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      undefined,
      env.ADMIN_TOKEN!,
      `Basic ${env.ADMIN_TOKEN}`,
      `Bearer ${env.ADMIN_TOKEN}x`,
      'Bearer ',
    ),
  },
);

function adminCase(route: Route): fc.Arbitrary<FuzzCase> {
  return fc
    .record({
      param: fc.oneof({ weight: 3, arbitrary: ids().map(encodeId) }, { weight: 1, arbitrary: nastySegment }),
      auth: authorization,
      type: contentType,
      body: fc.option(bodyBytes(adminBody()), { nil: undefined, freq: 8 }),
    })
    .map(({ param, auth, type, body }) => {
      const headers: Record<string, string> = {};
      if (auth !== undefined) headers.authorization = auth;
      if (type) headers['content-type'] = type;
      const hasBody = body !== undefined && route.method !== 'GET';
      return {
        route: `${route.method} ${route.path}`,
        request: new Request(`http://test${route.path.replace(/:[A-Za-z]+/g, param)}`, {
          method: route.method,
          headers,
          body: hasBody ? body : undefined,
        }),
      };
    });
}

/** A path segment from an id: percent-encoded, and never empty (an empty one is another route). */
function encodeId(id: string): string {
  return id ? encodeURIComponent(id.replace(/[\ud800-\udfff]/g, '\ufffd')) : '%20';
}

describe('fuzz: every /admin route', () => {
  itFuzzes(
    'answers no 5xx, writes nothing when it refuses, leaks no secret, and stays healthy',
    pool,
    () => ({
      group: '/admin',
      secrets: [...workerSecrets(), lark.appSecret, lark.verificationToken, lark.encryptKey!],
      targets: adminRoutes(),
      label: (r) => `${r.method} ${r.path}`,
      cases: adminCase,
      check: async (group, c) => {
        await group.send(c);
      },
    }),
  );
});
