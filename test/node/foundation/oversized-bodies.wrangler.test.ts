import { randomBytes } from 'node:crypto';
import http from 'node:http';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../scripts/lib/ports';
import { startWranglerDev, type WranglerDev } from '../../../scripts/lib/wrangler-dev';
import { signActorToken } from '../../../workers/auth/sign';

/**
 * Issue 29 hole 11, through `wrangler dev` (the stack `npm run dev` runs): a body over a route's
 * limit, declared or chunked, answered 413 or an early 401, must not take down the requests
 * after it. Before the fix the Worker read part of such a body and then cancelled the rest; the
 * runtime then closed that connection, and wrangler's proxy in front of the Worker sent the next
 * request over it: 503 "Your worker restarted mid-request" (docs/security.md "Request bodies").
 * No database is needed: every answer here comes before the first query.
 */
const root = fileURLToPath(new URL('../../../', import.meta.url));
const adminToken = randomBytes(16).toString('hex');
const actorSecret = randomBytes(32).toString('hex');
let port = 0;
let dev: WranglerDev | undefined;
let actorToken = '';

beforeAll(async () => {
  port = await freePort();
  actorToken = await signActorToken(actorSecret, 'actor_oversized');
  dev = startWranglerDev({
    root,
    port,
    quiet: true,
    envFile: `${root}.local/test-oversized-bodies.env`,
    persistTo: `${root}.local/test-oversized-bodies-state`,
    vars: {
      DATABASE_URL: 'postgres://unused@127.0.0.1:1/unused',
      ADMIN_TOKEN: adminToken,
      ACTOR_JWT_SECRET: actorSecret,
      SECRET_KEYS: JSON.stringify({ '1': randomBytes(32).toString('base64') }),
      LOG_LEVEL: 'error',
    },
  });
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/nowhere`)).status === 404) break;
    } catch {
      // By design: not listening yet.
    }
    if (i > 300) throw new Error('wrangler dev did not start');
    await new Promise((r) => setTimeout(r, 200));
  }
});
afterAll(() => dev?.stop());

type Framing = 'content-length' | 'chunked';
interface Answer {
  status: number | 'connection error';
  code?: string;
}

/** One request over a fresh connection; a chunked body goes out in 16 KiB writes. */
function send(
  method: string,
  path: string,
  headers: Record<string, string>,
  body: Buffer,
  framing: Framing,
): Promise<Answer> {
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        agent: false,
        headers: {
          'content-type': 'application/json',
          ...headers,
          ...(framing === 'content-length' ? { 'content-length': String(body.byteLength) } : {}),
        },
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (d: Buffer) => parts.push(d));
        res.on('end', () => {
          let code: string | undefined;
          try {
            code = JSON.parse(Buffer.concat(parts).toString('utf8')).error?.code;
          } catch {
            code = Buffer.concat(parts).toString('utf8').slice(0, 80);
          }
          resolve({ status: res.statusCode ?? 0, code });
        });
      },
    );
    req.setTimeout(30_000, () => req.destroy());
    req.on('error', () => resolve({ status: 'connection error' }));
    if (framing === 'content-length') return req.end(body);
    for (let at = 0; at < body.byteLength; at += 16 * 1024) req.write(body.subarray(at, at + 16 * 1024));
    req.end();
  });
}

const groups: { what: string; method: string; path: string; headers: () => Record<string, string> }[] = [
  { what: 'webhook', method: 'POST', path: '/lark/events/li_oversized', headers: () => ({}) },
  { what: '/v1, no token', method: 'POST', path: '/v1/reaction-tickets', headers: () => ({}) },
  {
    what: '/v1, actor token',
    method: 'POST',
    path: '/v1/reaction-tickets',
    headers: () => ({ authorization: `Bearer ${actorToken}` }),
  },
  { what: '/admin, no token', method: 'PUT', path: '/admin/workspaces/ws_oversized', headers: () => ({}) },
  {
    what: '/admin, admin token',
    method: 'PUT',
    path: '/admin/workspaces/ws_oversized',
    headers: () => ({ authorization: `Bearer ${adminToken}` }),
  },
  { what: 'console', method: 'POST', path: '/console/login', headers: () => ({}) },
];
const sizes = [300 * 1024, 8 * 1024 * 1024];
const framings: Framing[] = ['content-length', 'chunked'];

/** Two ordinary small POSTs that need no database: both must get their own 401. */
async function nextRequests(): Promise<Answer[]> {
  const small = Buffer.from('{}');
  return [
    await send('POST', '/v1/reaction-tickets', {}, small, 'content-length'),
    await send('PUT', '/admin/workspaces/ws_next', { authorization: 'Bearer wrong' }, small, 'chunked'),
  ];
}
const normal: Answer[] = [
  { status: 401, code: 'unauthorized' },
  { status: 401, code: 'unauthorized' },
];

describe('an oversized body does not take down the requests after it (wrangler dev)', () => {
  it('positive control: the next requests are answered normally with nothing before them', async () => {
    expect(await nextRequests()).toEqual(normal);
  });

  for (const group of groups)
    for (const framing of framings)
      it(`${group.what}, ${framing}: the oversized request is refused, the next ones are answered`, async () => {
        const seen: unknown[] = [];
        for (const size of sizes)
          for (let round = 0; round < 2; round++) {
            const body = Buffer.alloc(size, 'a');
            const oversized = await send(group.method, group.path, group.headers(), body, framing);
            seen.push({ size, round, oversized: oversized.status, next: await nextRequests() });
          }
        expect(seen).toEqual(
          sizes.flatMap((size) =>
            [0, 1].map((round) => ({ size, round, oversized: expect.any(Number), next: normal })),
          ),
        );
        for (const s of seen as { oversized: number }[]) expect([401, 413]).toContain(s.oversized);
      });
});
