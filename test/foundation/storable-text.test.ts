import { env, exports } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { app } from '../../workers/app';
import { testPool } from '../helpers/db';
import { changedTables, tableSums } from '../helpers/tables';

/**
 * Issue 29 hole 12: every text field of every JSON route goes through the one storable-text
 * check (workers/lib/pg-text.ts), whatever its own schema says: U+0000 or a lone surrogate in
 * any string of the body, a key included, is 400 validation_failed with nothing written, never
 * a 500 from Postgres (22021, 22P05, 22P02).
 */
const pool = testPool(2);
afterAll(() => pool.end());

/** Admin actions that take no body (a body sent is never read): nothing of it reaches SQL. */
const NO_BODY = new Set([
  'POST /admin/typing-reactions/enable',
  'POST /admin/typing-reactions/disable',
  'POST /admin/typing-reactions/stop',
  'POST /admin/reaction-contract/legacy/close',
]);

/** Every admin route that takes a body, from the app's own route table. */
function adminWriteRoutes(): { method: string; path: string }[] {
  const seen = new Map<string, { method: string; path: string }>();
  for (const r of app.routes)
    if (
      r.path.startsWith('/admin') &&
      ['POST', 'PUT', 'PATCH'].includes(r.method) &&
      !r.path.endsWith('*') &&
      !NO_BODY.has(`${r.method} ${r.path}`)
    )
      seen.set(`${r.method} ${r.path}`, { method: r.method, path: r.path.replace(/:[A-Za-z]+/g, 'x1') });
  return [...seen.values()];
}

/** Field names the admin bodies use: a bad value lands in a real field of most routes. */
const FIELDS = [
  'name',
  'workspaceId',
  'displayName',
  'title',
  'conversationId',
  'authorActorId',
  'body',
  'operator',
  'workspace_id',
  'app_id',
  'app_secret',
  'verification_token',
  'encrypt_key',
  'api_base',
];

describe('unstorable text anywhere in a JSON body', () => {
  for (const [what, bad] of [
    ['U+0000', 'a\u0000b'],
    ['a lone surrogate', 'a\ud800b'],
  ] as const)
    it(`${what} in every field of every admin write route → 400, nothing written`, async () => {
      const routes = adminWriteRoutes();
      expect(routes.length).toBeGreaterThanOrEqual(10);
      const before = await tableSums(pool);
      const seen: string[] = [];
      for (const { method, path } of routes)
        for (const token of [env.ADMIN_TOKEN, env.RETENTION_ADMIN_TOKEN])
          for (const body of [
            // Each value shaped as its field wants it apart from the one bad character.
            Object.fromEntries(
              FIELDS.map((f) => [
                f,
                f === 'api_base' ? `https://open.larksuite.com/${bad}` : f === 'app_id' ? 'cli_a1' : bad,
              ]),
            ),
            {
              workspace_id: 'ws_text',
              app_id: 'cli_text1',
              app_secret: 's',
              verification_token: 't',
              api_base: `https://open.larksuite.com/${bad}`,
            },
            { api_base: `http://127.0.0.1:1/${bad}` },
            { [bad]: 'x' },
            { name: [bad] },
            { add: [bad], remove: [] },
          ]) {
            const res = await exports.default.fetch(`http://test${path}`, {
              method,
              headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
              body: JSON.stringify(body),
            });
            const code = ((await res.json()) as { error?: { code: string } }).error?.code;
            // 401/403: the other credential; 404: an id that names nothing (checked before the body).
            if (
              ![400, 401, 403, 404].includes(res.status) ||
              (res.status === 400 && code !== 'validation_failed')
            )
              seen.push(`${method} ${path} ${JSON.stringify(Object.keys(body))}: ${res.status} ${code}`);
          }
      expect(seen).toEqual([]);
      expect(changedTables(before, await tableSums(pool))).toEqual([]);
    });
});
