import { env, exports } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { app } from '../../workers/app';

/**
 * GET /admin/openapi.json lists every admin route (issue 33 item 5): the app's own route table
 * is walked, so a route added without its entry in workers/admin/openapi.ts fails here.
 */
const METHODS = new Set(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']);

/** Every admin route of the app as `METHOD /path/{param}` (middleware entries are `ALL`). */
function adminRoutes(): string[] {
  const routes = app.routes
    .filter((r) => r.path.startsWith('/admin') && METHODS.has(r.method))
    .map((r) => `${r.method} ${r.path.replace(/\/$/, '').replace(/:(\w+)/g, '{$1}')}`);
  return [...new Set(routes)].sort();
}

interface Operation {
  requestBody?: { content: Record<string, { schema: unknown }> };
  responses: Record<string, { content?: Record<string, { schema: unknown }> }>;
  security?: unknown[];
  parameters?: { in: string; name: string }[];
}
type Document = { openapi: string; paths: Record<string, Record<string, Operation>> };

async function fetchDocument(): Promise<Document> {
  const res = await exports.default.fetch('http://test/admin/openapi.json', {
    headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` },
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Document;
}

function documented(doc: Document): string[] {
  return Object.entries(doc.paths)
    .flatMap(([path, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${path}`))
    .sort();
}

describe('GET /admin/openapi.json', () => {
  it('lists every admin route of the app, and no route the app does not have', async () => {
    const doc = await fetchDocument();
    expect(doc.openapi).toBe('3.1.0');
    const routes = adminRoutes();
    expect(routes.length).toBeGreaterThan(30);
    expect(routes).toContain('POST /admin/effects/dead-letters/requeue');
    const listed = documented(doc);
    expect(
      routes.filter((r) => !listed.includes(r)),
      'admin routes missing from workers/admin/openapi.ts',
    ).toEqual([]);
    expect(
      listed.filter((r) => !routes.includes(r)),
      'documented routes the app does not have',
    ).toEqual([]);
  });

  it('gives each route its request schema, success and error answers, and the admin credential', async () => {
    const doc = await fetchDocument();
    for (const [path, item] of Object.entries(doc.paths))
      for (const [method, op] of Object.entries(item)) {
        const name = `${method} ${path}`;
        expect(op.security, name).toEqual([{ adminBearer: [] }]);
        const ok = op.responses['200'] ?? op.responses['201'] ?? op.responses['202'];
        expect(ok?.content?.['application/json']?.schema, name).toBeDefined();
        expect(op.responses['401'], name).toBeDefined();
        for (const param of path.matchAll(/\{(\w+)\}/g))
          expect(
            op.parameters?.some((p) => p.in === 'path' && p.name === param[1]),
            name,
          ).toBe(true);
        if (
          ['post', 'put', 'patch'].includes(method) &&
          !/enable$|disable$|stop$|sign-out$|close$|remove$/.test(path)
        )
          expect(op.requestBody?.content['application/json']?.schema, name).toBeDefined();
      }
    const requeue = doc.paths['/admin/effects/dead-letters/requeue']!.post!;
    const body = requeue.requestBody!.content['application/json']!.schema as {
      properties: Record<string, { maxLength?: number; maximum?: number }>;
      required: string[];
    };
    expect(Object.keys(body.properties).sort()).toEqual(
      ['cursor', 'from', 'installation', 'limit', 'operator', 'to'].sort(),
    );
    expect(body.required.sort()).toEqual(['installation', 'operator']);
    expect(body.properties.limit!.maximum).toBe(1000);
    // Every pattern is a plain ECMA-262 source that compiles, the operator's included.
    const patterns: string[] = [];
    const walk = (v: unknown): void => {
      if (v && typeof v === 'object')
        for (const [k, x] of Object.entries(v)) k === 'pattern' ? patterns.push(String(x)) : walk(x);
    };
    walk(doc);
    expect(patterns.length).toBeGreaterThan(2);
    for (const p of patterns) expect(() => new RegExp(p, 'u'), p).not.toThrow();
    const operator = (body.properties.operator as { pattern: string }).pattern;
    expect(new RegExp(operator, 'u').test('ops@example.com'), operator).toBe(true);
    const page = doc.paths['/admin/typing-reactions/workspaces/{workspaceId}/rows']!.get!;
    expect(
      page
        .parameters!.filter((p) => p.in === 'query')
        .map((p) => p.name)
        .sort(),
    ).toEqual(['after', 'limit', 'state']);
  });

  it('is behind the admin token', async () => {
    const res = await exports.default.fetch('http://test/admin/openapi.json');
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
  });
});
