// npx tsx bench/probes/unread-body.ts [requests] [concurrency] [bodyBytes] [length|chunked] [http|fetch] [unread|read]
//
// Issue 16 item 7: requests whose body the Worker never reads (an early 401), sent over
// keep-alive connections to `wrangler dev`, counted by status. Before the fix the local
// runtime answered some of them 501 "Unrecognized request method": the unread bytes were
// taken for the connection's next request. Needs no database (the 401 comes first).
import { randomBytes } from 'node:crypto';
import http from 'node:http';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { freePort } from '../../scripts/lib/postgres';
import { startWranglerDev } from '../../scripts/lib/wrangler-dev';

const requests = Number(process.argv[2] ?? 2000);
const concurrency = Number(process.argv[3] ?? 32);
const bodyBytes = Number(process.argv[4] ?? 64 * 1024);
/** `chunked`: no Content-Length, the body sent in 16 KiB writes (Transfer-Encoding: chunked). */
const chunked = process.argv[5] === 'chunked';
/** `fetch` mode: Node's own fetch (undici, keep-alive pool) instead of node:http. */
const viaFetch = process.argv[6] === 'fetch';
/** `read`: the right admin token, so the route reads the (non-JSON) body and answers 400. */
const readBody = process.argv[7] === 'read';
const adminToken = randomBytes(16).toString('hex');
const authorization = `Bearer ${readBody ? adminToken : 'wrong'}`;
const root = fileURLToPath(new URL('../../', import.meta.url));
const port = await freePort();
const dev = startWranglerDev({
  root,
  port,
  quiet: true,
  envFile: `${root}.local/probe-unread-body.env`,
  persistTo: `${root}.local/probe-unread-body-state`,
  vars: {
    DATABASE_URL: 'postgres://unused@127.0.0.1:1/unused',
    ADMIN_TOKEN: adminToken,
    SECRET_KEYS: JSON.stringify({ '1': randomBytes(32).toString('base64') }),
    LOG_LEVEL: 'error',
  },
});

for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.on(signal, () => {
    dev.stop();
    process.exit(1);
  });

async function ready(): Promise<void> {
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/nowhere`)).status === 404) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error('wrangler dev did not start');
}

/** The first few answers other than the expected 401/413, to say what they were. */
const samples: string[] = [];
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
const body = randomBytes(bodyBytes / 2).toString('hex');

async function oneFetch(): Promise<number> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/admin/workspaces/ws_probe`, {
      method: 'PUT',
      headers: { authorization, 'content-type': 'application/json' },
      body,
      signal: AbortSignal.timeout(10_000),
    });
    const text = await res.text();
    if (res.status !== 401 && res.status !== 413 && res.status !== 400 && samples.length < 3)
      samples.push(`${res.status} ${text.slice(0, 200)}`);
    return res.status;
  } catch (err) {
    return (err as Error).name === 'TimeoutError' ? -2 : -1;
  }
}

function one(): Promise<number> {
  if (viaFetch) return oneFetch();
  return new Promise((resolve) => {
    const req = http.request(
      {
        agent,
        host: '127.0.0.1',
        port,
        method: 'PUT',
        path: '/admin/workspaces/ws_probe',
        headers: {
          authorization,
          'content-type': 'application/json',
          ...(chunked ? {} : { 'content-length': String(Buffer.byteLength(body)) }),
        },
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (d: Buffer) => parts.push(d));
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          if (process.env.PROBE_VERBOSE && status !== 401)
            console.error(status, res.headers, Buffer.concat(parts).toString('utf8').slice(0, 300));
          if (status !== 401 && status !== 413 && status !== 400 && samples.length < 3)
            samples.push(`${status} ${Buffer.concat(parts).toString('utf8').slice(0, 200)}`);
          resolve(status);
        });
      },
    );
    // -1: the connection failed; -2: no answer within 10 s.
    const timer = setTimeout(() => {
      req.destroy();
      resolve(-2);
    }, 10_000);
    req.on('close', () => clearTimeout(timer));
    req.on('error', () => resolve(-1));
    if (!chunked) return req.end(body);
    for (let at = 0; at < body.length; at += 16 * 1024) req.write(body.slice(at, at + 16 * 1024));
    req.end();
  });
}

try {
  await ready();
  const counts: Record<string, number> = {};
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < requests) {
        next += 1;
        const status = String(await one());
        if (process.env.PROBE_VERBOSE) console.error(next, status);
        counts[status] = (counts[status] ?? 0) + 1;
      }
    }),
  );
  console.log(JSON.stringify({ requests, concurrency, bodyBytes, chunked, readBody, counts, samples }));
} finally {
  agent.destroy();
  dev.stop();
}
