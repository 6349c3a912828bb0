import { env } from 'cloudflare:workers';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { app } from '../../workers/app';
import { installApp, type TestApp } from '../lark/helpers';
import { seedWorld, type World } from '../reaction-tickets/helpers';
import { type FuzzCase, fuzzPool, itFuzzes, workerSecrets } from './harness';

/**
 * Issue 29 hole 11: a body over every route's limit (256 KiB is the largest), declared or
 * chunked, on every route of the app's route table that takes a method with a body, with and
 * without credentials. Each is refused (4xx, nothing written, the harness's checks), and the
 * ordinary request sent right after it is answered as it would be on its own. Here the requests
 * go through the Worker's own fetch; the same matrix through `wrangler dev`, where the hole was
 * seen, is test/node/foundation/oversized-bodies.wrangler.test.ts.
 */
const pool = fuzzPool();

const OVER_EVERY_LIMIT = 256 * 1024 + 1;
const MAX_FUZZ_BODY = 1024 * 1024;

interface Route {
  method: string;
  path: string;
}

/** Every route that can carry a body (GET and HEAD cannot), from the app's own table. */
function bodyRoutes(): Route[] {
  const seen = new Map<string, Route>();
  for (const r of app.routes)
    if (!['GET', 'HEAD', 'ALL'].includes(r.method) && !r.path.endsWith('*'))
      seen.set(`${r.method} ${r.path}`, { method: r.method, path: r.path });
  return [...seen.values()];
}

let world: World;
let lark: TestApp;
beforeAll(async () => {
  world = await seedWorld(1, 2);
  lark = await installApp();
}, 60_000);

/** A body of `size` bytes made as it is read, in chunks of `chunk` bytes: no declared length. */
function chunked(size: number, chunk: number): ReadableStream<Uint8Array> {
  const piece = new Uint8Array(chunk).fill(0x61);
  let sent = 0;
  return new ReadableStream<Uint8Array>({
    pull(ctl) {
      if (sent >= size) return ctl.close();
      const n = Math.min(chunk, size - sent);
      sent += n;
      ctl.enqueue(n === chunk ? piece : piece.subarray(0, n));
    },
  });
}

/** `declared`: sent with its Content-Length, so every route refuses it before reading. */
function oversizedCase(route: Route): fc.Arbitrary<FuzzCase & { declared: boolean }> {
  return fc
    .record({
      size: fc.oneof(
        fc.constantFrom(OVER_EVERY_LIMIT, 300 * 1024, MAX_FUZZ_BODY),
        fc.integer({ min: OVER_EVERY_LIMIT, max: MAX_FUZZ_BODY }),
      ),
      framing: fc.constantFrom('content-length', 'chunked'),
      chunk: fc.constantFrom(1, 1024, 16 * 1024, 64 * 1024, 1024 * 1024),
      auth: fc.constantFrom<(string | undefined)[]>(
        undefined,
        `Bearer ${env.ADMIN_TOKEN}`,
        `Bearer ${env.RETENTION_ADMIN_TOKEN}`,
        'Bearer wrong',
        'actor',
      ),
      type: fc.constantFrom('application/json', 'text/plain', ''),
    })
    .map(({ size, framing, chunk, auth, type }) => {
      const headers: Record<string, string> = {};
      if (auth === 'actor') headers.authorization = `Bearer ${world.tokens[0]}`;
      else if (auth) headers.authorization = auth;
      if (type) headers['content-type'] = type;
      const param = route.path.startsWith('/lark/events') ? lark.installationId : world.messages[0]!;
      const declared = framing === 'content-length' || chunk < 1024;
      // A Request made here does not add the header itself (the wire would).
      if (declared) headers['content-length'] = String(size);
      return {
        declared,
        route: `${route.method} ${route.path}`,
        request: new Request(`http://test${route.path.replace(/:[A-Za-z]+/g, param)}`, {
          method: route.method,
          headers,
          // A 1-byte chunk of 1 MiB is a million reads: the small chunks go with the declared form.
          body: declared ? new Uint8Array(size).fill(0x61) : chunked(size, chunk),
        }),
      };
    });
}

/** The ordinary requests after each oversized one, and what each answers on its own. */
const followUps = (): [FuzzCase, number][] => [
  [
    {
      route: 'POST /v1/reaction-tickets',
      request: new Request('http://test/v1/reaction-tickets', { method: 'POST', body: '{}' }),
    },
    401,
  ],
  [
    {
      route: 'PUT /admin/workspaces/:workspaceId',
      request: new Request(`http://test/admin/workspaces/${world.workspaceId}`, {
        method: 'PUT',
        headers: { authorization: 'Bearer wrong', 'content-type': 'application/json' },
        body: '{"name":"x"}',
      }),
    },
    401,
  ],
];

describe('fuzz: an oversized body on every route', () => {
  const after: string[] = [];
  itFuzzes('is refused with nothing written, and the requests after it are answered normally', pool, () => {
    const routes = bodyRoutes();
    expect(routes.length).toBeGreaterThanOrEqual(15);
    return {
      group: 'oversized bodies',
      secrets: workerSecrets(),
      targets: routes,
      label: (r) => `${r.method} ${r.path}`,
      cases: oversizedCase,
      check: async (group, c) => {
        const { status } = await group.send(c);
        // An undeclared body is counted as the route reads it: a route that reads no body
        // (an action such as POST /admin/typing-reactions/stop) answers as it would without
        // one, and the body is read to its end and dropped. A declared one is always 413.
        if (status < 400 && c.declared) after.push(`${c.route}: ${status} to an oversized body`);
        for (const [next, expected] of followUps()) {
          const answer = await group.send(next);
          if (answer.status !== expected)
            after.push(`${next.route} after ${c.route}: ${answer.status} ${answer.text.slice(0, 120)}`);
        }
      },
      after: () => expect(after.slice(0, 10)).toEqual([]),
    };
  });
});
