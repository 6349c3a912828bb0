/**
 * The alert path through the real Workers: the main Worker's and the retention Worker's deploy
 * bundles (wrangler deploy --dry-run, as `npm run build:check` builds them) and the alerts Tail
 * Worker's, under Miniflare with the `tail_consumers` of their configs, and a local webhook
 * receiver. The database is down (its proxy address refuses connections), so the service
 * logs real alert events (`health_db_down`, `db_unavailable`) on its answer path.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { promisify } from 'node:util';
import { convertV4MiniflareOptions, Miniflare } from 'miniflare';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { unstable_getMiniflareWorkerOptions } from 'wrangler';
import { dedupeKey } from '../../../workers/alerts/events';
import type { GateState } from '../../../workers/alerts/gate';
import { UNKNOWN_WORKER } from '../../../workers/alerts/tail';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const ADMIN_TOKEN = 'alerts-test-admin-token-0123456789abcdef';
/** A port nothing listens on: every database connection is refused at once. */
const DEAD = '127.0.0.1:9';

const dirs: string[] = [];
async function bundle(config: string): Promise<string> {
  const outdir = await mkdtemp(join(tmpdir(), 'rl-alerts-bundle-'));
  dirs.push(outdir);
  await promisify(execFile)(
    join(root, 'node_modules/.bin/wrangler'),
    ['deploy', '--dry-run', '--env=', '--outdir', outdir, '-c', config],
    {
      cwd: root,
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CLOUDFLARE_CF_FETCH_ENABLED: 'false' },
    },
  );
  const script = (await readdir(outdir)).find((n) => n.endsWith('.js'));
  if (!script) throw new Error(`no module for ${config}`);
  return join(outdir, script);
}

/** Miniflare options of one config's real bundle, with `tails` as its config names them. */
async function worker(config: string, bindings: Record<string, string>) {
  // One bundled module each: the config's module rules have nothing to apply to (and Miniflare
  // 5's converter refuses them).
  const { modulesRules: _rules, ...workerOptions } = unstable_getMiniflareWorkerOptions(
    join(root, config),
  ).workerOptions;
  const scriptPath = await bundle(config);
  const raw = (await import('wrangler')).unstable_readConfig({ config: join(root, config) });
  return {
    ...workerOptions,
    name: raw.name,
    modules: true,
    modulesRoot: dirname(scriptPath),
    scriptPath,
    bindings: { ...(workerOptions.bindings as Record<string, string>), ...bindings },
    tails: (raw.tail_consumers ?? []).map((t: { service: string }) => t.service),
  };
}

interface Received {
  body: { msg_type?: string; content?: { text: string } };
  at: number;
}
const received: Received[] = [];
let answer = 200;
let receiver: Server;
let mf: Miniflare;
let output = '';

const texts = () => received.map((r) => r.body.content?.text ?? '');
async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, ms = 30_000) {
  const started = Date.now();
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() - started > ms)
      throw new Error(`timed out waiting for ${what}; the Workers printed:\n${output.slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
async function gate(): Promise<GateState> {
  const ns = await mf.getDurableObjectNamespace('ALERT_GATE', 'reaction-ledger-alerts');
  const stub = ns.get(ns.idFromName('global')) as unknown as { peek(): Promise<GateState> };
  return stub.peek();
}
const count = async (key: string) => (await gate()).keys[key]?.count ?? 0;

beforeAll(async () => {
  receiver = createServer((req, res) => {
    let data = '';
    req.on('data', (c) => {
      data += c;
    });
    req.on('end', () => {
      received.push({ body: JSON.parse(data), at: Date.now() });
      res.writeHead(answer).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  const database = {
    DATABASE_URL: `postgres://ledger:dbpass-not-real@${DEAD}/ledger`,
    NEON_WS_PROXY: `${DEAD}/v2`,
  };
  const [main, retention, alerts] = await Promise.all([
    worker('wrangler.toml', {
      ...database,
      ADMIN_TOKEN,
      RETENTION_ADMIN_TOKEN: 'alerts-test-retention-token-0123456789',
      SECRET_KEYS: JSON.stringify({ '1': 'MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=' }),
      ACTOR_JWT_SECRET: 'alerts-test-actor-jwt-secret-0123456789abcdef',
      LARK_API_BASE: `http://${DEAD}`,
      DO_ALARMS: 'manual',
    }),
    worker('retention.wrangler.toml', database),
    worker('alerts.wrangler.toml', {
      ALERT_WEBHOOK_URL: hook,
      ALERT_WEBHOOK_FORMAT: 'lark',
      ALERT_WEBHOOK_TIMEOUT_MS: '500',
    }),
  ]);
  mf = new Miniflare(
    convertV4MiniflareOptions({
      workers: [main, retention, alerts],
      handleRuntimeStdio(stdout: Readable, stderr: Readable) {
        for (const stream of [stdout, stderr])
          stream.on('data', (c: Buffer) => {
            output += c;
          });
      },
      // Miniflare 5 hands the Workers' console lines over as structured logs, not on stdio.
      handleStructuredLogs({ message }: { message: string }) {
        output += `${message}\n`;
      },
    } as never),
  );
  try {
    await mf.ready;
  } catch (err) {
    // workerd says why on its own output, which the handler above keeps.
    throw new Error(`${(err as Error).message}\n${output}`);
  }
}, 180_000);

afterAll(async () => {
  await mf?.dispose();
  await new Promise((r) => receiver?.close(r));
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('alerts reach the webhook (the real Workers, tail_consumers, a local receiver)', () => {
  it('a burst of one alert event is one notification, in Lark JSON, without the secrets', async () => {
    for (let i = 0; i < 5; i++) {
      const res = await mf.dispatchFetch('http://localhost/healthz');
      expect(res.status).toBe(503);
      await res.arrayBuffer();
    }
    // Traces carry no scriptName under Miniflare (production names the Worker).
    const key = dedupeKey(UNKNOWN_WORKER, 'health_db_down', {});
    // Every line of the burst has reached the gate, and the one it admitted has been received.
    await until('the burst at the gate', async () => ((await count(key)) === 5 ? true : undefined));
    await until('the notification', () => (received.length > 0 ? true : undefined));
    const ours = texts().filter((t) => t.includes('health_db_down'));
    expect(ours).toHaveLength(1);
    expect(received[0]!.body.msg_type).toBe('text');
    expect(ours[0]).toContain(`[warn] health_db_down on ${UNKNOWN_WORKER}`);
    for (const secret of ['dbpass-not-real', ADMIN_TOKEN, '/hook']) expect(ours[0]).not.toContain(secret);
  });

  it('a dead webhook costs the service nothing: it answers as before, and the failed delivery is one log line', async () => {
    answer = 500;
    const before = received.length;
    const started = Date.now();
    // A wrong admin token at the console's sign-in: `console_sign_in_refused`, no database.
    const res = await mf.dispatchFetch('http://localhost/console/login', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'operator=ops&token=wrong-token-guess',
    });
    await res.arrayBuffer();
    expect(res.status).toBe(401);
    expect(Date.now() - started).toBeLessThan(5000);
    await until('the failed delivery', () => (received.length > before ? true : undefined));
    await until('alert_delivery_failed', () =>
      output.includes('"event":"alert_delivery_failed"') ? true : undefined,
    );
    expect(texts().at(-1)).toContain(`[warn] console_sign_in_refused on ${UNKNOWN_WORKER}`);
    expect(texts().at(-1)).not.toContain('wrong-token-guess');
    expect(output.match(/"event":"alert_delivery_failed"/g)).toHaveLength(1);
  });
});
