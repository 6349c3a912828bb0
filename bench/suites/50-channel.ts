import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { startLarkEmulator } from '../../emulator/server';
import { startBridge } from '../../scripts/lib/bridge';
import { type PgBouncer, startPgBouncer } from '../../scripts/lib/pgbouncer';
import { freePort } from '../../scripts/lib/postgres';
import { startWranglerDev, type WranglerDev } from '../../scripts/lib/wrangler-dev';
import { CLK_TCK, serverCpuTicks } from '../lib/backend-cpu';
import { startCpuProfile } from '../lib/cpu-profile';
import { cpuMsPer, groupCpuTicks, processCpuTicks } from '../lib/process-cpu';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';

/**
 * The Lark webhook end to end, as Lark calls it: `wrangler dev` (workerd) with the real
 * Worker, the emulator building signed + encrypted `im.message.receive_v1` deliveries, each
 * event in its own chat. Latency = POST sent → answer received (the deliveries are built
 * before timing). Round trips are COUNTED, not guessed: the Worker reaches Postgres through
 * a counting WebSocket bridge that parses the wire protocol, attributes each connection to
 * the webhook when it carries the event-receipt insert, and counts ReadyForQuery ('Z')
 * messages on it (one per round trip; the connection's startup ReadyForQuery is reported
 * separately as "connect"). The webhook's pool ends with its request, so every round trip on
 * it happens before the answer; the ActorHost wake and the Typing Add run on their own pools.
 */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const RECEIPT_MARKER = 'insert into lark_event_receipts';

interface ConnStats {
  webhook: boolean;
  trips: number;
  startup: boolean;
  /** The connection's first statement, abbreviated: who opened it (answer, Add, actor host...). */
  first: string;
  /**
   * Round trips up to and including the one carrying the receipt insert: the answer goes out
   * after it, and the Typing Add then rides the same connection (its trips come after).
   */
  answerTrips: number;
  /**
   * WebSocket frames from the driver after the startup (the bridge's client callback runs once
   * per WebSocket message: `ws` hands over whole messages), a Terminate-only frame not counted.
   * The isolate pays a native `send` per frame, so frames per round trip above 1 is CPU spent
   * on a message split apart (a Sync sent alone, coalesceWrites not coalescing).
   */
  frames: number;
  /** Frames up to and including the one carrying the receipt insert (the answer's). */
  answerFrames: number;
  /** Each frame's messages, e.g. `P<select 1> B D E S` (BENCH_CHANNEL_FRAMES=1 prints the commonest). */
  shapes: string[];
}

/** Who opened a connection, read from its first statement. */
function opener(first: string): string {
  if (first.includes('from lark_installations')) return 'webhook answer (installation load)';
  if (first.includes('from actor_instances')) return 'actor host pump';
  if (first.includes('typing_reactions')) return 'typing Add / settle';
  if (first.includes('select 1')) return 'healthz';
  return first.slice(0, 48);
}

/** The shared bridge (scripts/lib/bridge.ts) with a wire-protocol tap on each connection. */
async function countingBridge() {
  const conns: ConnStats[] = [];
  const bridge = await startBridge(0, '127.0.0.1', {
    onConnection: () => {
      const stats: ConnStats = {
        webhook: false,
        trips: 0,
        startup: true,
        first: '',
        answerTrips: 0,
        frames: 0,
        answerFrames: 0,
        shapes: [],
      };
      conns.push(stats);
      let clientBuf = Buffer.alloc(0);
      let clientTyped = false;
      let serverBuf = Buffer.alloc(0);
      let sslPending = false;
      const client = (data: Buffer) => {
        clientBuf = Buffer.concat([clientBuf, data]);
        // After the startup only (a frame of the startup exchange is its cost, reported as connect).
        const counted = clientTyped && !stats.startup;
        const shape: string[] = [];
        parse(shape);
        if (!counted || shape.join(' ') === 'X') return;
        stats.frames++;
        if (shape.includes('receipt')) stats.answerFrames = stats.frames;
        stats.shapes.push(shape.filter((m) => m !== 'receipt').join(' '));
      };
      const parse = (shape: string[]) => {
        for (;;) {
          if (!clientTyped) {
            if (clientBuf.length < 8) return;
            const len = clientBuf.readInt32BE(0);
            if (clientBuf.length < len) return;
            if (clientBuf.readInt32BE(4) === 80877103) sslPending = true;
            else clientTyped = true;
            clientBuf = clientBuf.subarray(len);
            continue;
          }
          if (clientBuf.length < 5) return;
          const len = clientBuf.readInt32BE(1);
          if (clientBuf.length < len + 1) return;
          const type = String.fromCharCode(clientBuf[0]!);
          if ((type === 'P' || type === 'Q') && !stats.first) {
            const text = clientBuf
              .subarray(type === 'P' ? 6 : 5, Math.min(len + 1, 400))
              .toString()
              .replace(/\s+/g, ' ');
            // A one-shot's budget prelude and a transaction's begin say nothing about the caller.
            if (!/^(select set_config\('statement_timeout'|begin)/.test(text)) stats.first = text;
          }
          if ((type === 'P' || type === 'Q') && clientBuf.subarray(5, len + 1).includes(RECEIPT_MARKER)) {
            stats.webhook = true;
            stats.answerTrips = stats.trips + 1;
            shape.push('receipt');
          }
          shape.push(
            type === 'P' || type === 'Q'
              ? `${type}<${clientBuf
                  .subarray(type === 'P' ? 6 : 5, Math.min(len + 1, 60))
                  .toString()
                  .replace(/\s+/g, ' ')
                  .slice(0, 36)}>`
              : type,
          );
          clientBuf = clientBuf.subarray(len + 1);
        }
      };
      const server = (data: Buffer) => {
        serverBuf = Buffer.concat([serverBuf, data]);
        if (sslPending && serverBuf.length > 0) {
          sslPending = false;
          serverBuf = serverBuf.subarray(1);
        }
        for (;;) {
          if (serverBuf.length < 5) return;
          const len = serverBuf.readInt32BE(1);
          if (serverBuf.length < len + 1) return;
          if (serverBuf[0] === 0x5a) {
            if (stats.startup) stats.startup = false;
            else stats.trips++;
          }
          serverBuf = serverBuf.subarray(len + 1);
        }
      };
      return { client, server };
    },
  });
  return { conns, port: bridge.port, close: bridge.close };
}

/**
 * Durable Object state of the bench's wrangler dev, wiped before each run: an earlier run's
 * actor hosts keep their alarms and would pump (and take connections) in this one.
 */
/**
 * On tmpfs where the machine has one (BENCH_WRANGLER_STATE to choose): local workerd creates each
 * new Durable Object's SQLite file on the isolate's own thread, and on disk that was most of the
 * ActorHost wake's synchronous cost in the webhook's profile (957 ms of 3.7 s busy at 64
 * concurrent events, 322 ms on tmpfs; docs/benchmarks.md). Cloudflare runs the object's storage
 * elsewhere, never on the webhook's isolate, so the disk's cost is the local runtime's, not ours.
 */
const BENCH_STATE =
  process.env.BENCH_WRANGLER_STATE ??
  (existsSync('/dev/shm')
    ? `/dev/shm/reaction-ledger-bench-wrangler-${createHash('sha256').update(ROOT).digest('hex').slice(0, 8)}`
    : `${ROOT}.local/bench-wrangler`);
const BENCH_CONFIG = `${ROOT}.local/bench-wrangler.toml`;

/**
 * The bench's Wrangler config: wrangler.toml with ONE change, the webhook's per-installation
 * rate limit (1,200 requests / 60 s in production) raised to BENCH_CHANNEL_RATE_LIMIT
 * (default 1,000,000). Every bench event is for one installation, so past ~1,100 events a
 * minute the production limit answers 429, which is the limiter doing its job and says
 * nothing about the webhook's speed; counting those as answers would flatter the figures,
 * counting them as failures would measure the limiter. `main` is rewritten to stay relative
 * to the checkout (the file lives under .local/).
 */
function benchConfig(): string {
  const limit = Number(process.env.BENCH_CHANNEL_RATE_LIMIT ?? 1_000_000);
  const original = readFileSync(`${ROOT}wrangler.toml`, 'utf8');
  const text = original
    .replace(/^main = "workers\/index\.ts"$/m, 'main = "../workers/index.ts"')
    .replace(/(name = "WEBHOOK_RATE_LIMIT"\nnamespace_id = "\d+"\nsimple = \{ limit = )\d+/, `$1${limit}`);
  if (!text.includes('../workers/index.ts') || !text.includes(`limit = ${limit}, period = 60`))
    throw new Error('wrangler.toml changed shape: update benchConfig() in bench/suites/50-channel.ts');
  writeFileSync(BENCH_CONFIG, text);
  return BENCH_CONFIG;
}

/** wrangler dev with its secrets in a 0600 env file, never on the command line (`ps`). */
export async function startWorker(
  vars: Record<string, string>,
  port: number,
  opts: { inspectorPort?: number; keepState?: boolean } = {},
): Promise<WranglerDev> {
  if (!opts.keepState) rmSync(BENCH_STATE, { recursive: true, force: true });
  const dev = startWranglerDev({
    root: ROOT,
    port,
    config: benchConfig(),
    vars,
    envFile: `${ROOT}.local/bench-dev.vars`,
    persistTo: BENCH_STATE,
    quiet: true,
    ...(opts.inspectorPort ? { inspectorPort: opts.inspectorPort } : {}),
  });
  for (let i = 0; i < 240; i++) {
    if (
      await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return dev;
    await new Promise((r) => setTimeout(r, 250));
  }
  dev.stop();
  throw new Error('wrangler dev did not become healthy');
}

/** Runs `n` calls of `call` with `concurrency` in flight; latencies (ms) and non-200 count. */
async function load(n: number, concurrency: number, call: (i: number) => Promise<number>) {
  const latencies: number[] = [];
  let next = 0;
  let failures = 0;
  const statuses = new Map<number, number>();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const i = next++;
        const started = performance.now();
        const status = await call(i).catch(() => 0);
        latencies.push(performance.now() - started);
        if (status !== 200) {
          failures++;
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
        }
      }
    }),
  );
  const failed = [...statuses].map(([s, k]) => `${k}×${s || 'network'}`).join(' ');
  return { latencies, failures, failed };
}

const loadAverage = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/**
 * The endpoints measured, one after the other in the same run (BENCH_CHANNEL_VIA, default
 * both): `direct`, the Worker's pools to Postgres itself, where every connection forks a
 * backend and fills its catalog caches; `pgbouncer`, PgBouncer in transaction mode
 * (BENCH_POOL_SIZE server connections, default 20), the local stand-in for the Neon pooled
 * endpoint production uses (README "Deploy"), where backends are reused as they are there.
 */
const ENDPOINTS = (process.env.BENCH_CHANNEL_VIA ?? 'direct,pgbouncer').split(',');

export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const endpoint of ENDPOINTS) {
    if (endpoint !== 'direct' && endpoint !== 'pgbouncer') throw new Error(`BENCH_CHANNEL_VIA: ${endpoint}?`);
    rows.push(...(await runVia(stack, endpoint)));
  }
  return rows;
}

async function runVia(stack: BenchStack, endpoint: 'direct' | 'pgbouncer'): Promise<BenchRow[]> {
  const bridge = await countingBridge();
  const pgbouncer: PgBouncer | undefined =
    endpoint === 'pgbouncer'
      ? await startPgBouncer(stack.databaseUrl, { poolSize: Number(process.env.BENCH_POOL_SIZE ?? 20) })
      : undefined;
  const via = pgbouncer ? `, via PgBouncer pool ${process.env.BENCH_POOL_SIZE ?? 20}` : ', direct';
  const lark = await startLarkEmulator({ rateLimits: false });
  const port = await freePort();
  const profileFile = process.env.BENCH_CHANNEL_PROFILE;
  const inspectorPort = profileFile ? await freePort() : undefined;
  const adminToken = `bench-admin-${randomBytes(12).toString('hex')}`;
  const worker = await startWorker(
    {
      DATABASE_URL: pgbouncer ? pgbouncer.rewrite(stack.databaseUrl) : stack.databaseUrl,
      NEON_WS_PROXY: `127.0.0.1:${bridge.port}/v2`,
      ADMIN_TOKEN: adminToken,
      SECRET_KEYS: JSON.stringify({ '1': randomBytes(32).toString('base64') }),
      LARK_API_BASE: lark.url,
      LOG_LEVEL: 'error',
    },
    port,
    { ...(inspectorPort ? { inspectorPort } : {}) },
  );
  const base = `http://127.0.0.1:${port}`;
  const rows: BenchRow[] = [];
  // Process bookkeeping (effect-recovery): effect_processes rows sampled through the run; and
  // the server's own count of this database's backends (pg_stat_activity), the figure that
  // meets max_connections.
  const db = stack.pg(1);
  const processRows = async () =>
    Number((await db.query('select count(*)::int as n from effect_processes')).rows[0].n);
  const backends = async () =>
    Number(
      (
        await db.query(
          `select count(*)::int as n from pg_stat_activity
            where datname = current_database() and pid <> pg_backend_pid()`,
        )
      ).rows[0].n,
    );
  const maxConnections = Number((await db.query('show max_connections')).rows[0].max_connections);
  let peakProcesses = 0;
  let peakBackends = 0;
  let peakShape = '';
  const shape = async () =>
    (
      await db.query<{ what: string; n: number }>(
        `select coalesce(state, '?') || ': ' || left(regexp_replace(query, 's+', ' ', 'g'), 40) as what,
                count(*)::int as n
           from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()
          group by 1 order by 2 desc limit 6`,
      )
    ).rows
      .map((r) => `${r.n} ${r.what}`)
      .join(' | ');
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peakProcesses = Math.max(peakProcesses, await processRows());
      const now = await backends();
      if (now > peakBackends && process.env.BENCH_CHANNEL_SHAPE) peakShape = await shape();
      peakBackends = Math.max(peakBackends, now);
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  // CPU per request of the local Worker (workerd; wrangler's node proxy), of the Postgres server
  // (every process of the bench's embedded server, backends that ended included) and of
  // PgBouncer when used, from /proc, over the answer phase only (the turns after an answer run
  // later and land in the next phase's window as background, at most). A figure the machine's
  // other load inflates less than latency does, so a loaded run still compares.
  const pgid = worker.process.pid ?? 0;
  const bouncerPid = pgbouncer?.pid;
  const cpuSample = async () => ({
    group: await groupCpuTicks(pgid),
    pg: await serverCpuTicks(db),
    bouncer: bouncerPid ? await processCpuTicks(bouncerPid) : 0,
  });
  type CpuSample = Awaited<ReturnType<typeof cpuSample>>;
  const cpuPer = (a: CpuSample, b: CpuSample, items: number) => {
    const per = cpuMsPer(a.group, b.group, items);
    const row: Record<string, number> = {};
    for (const [comm, ms] of Object.entries(per)) row[`${comm} CPU ms/req`] = ms;
    const msPer = (ticks: number) =>
      Math.round((Math.max(0, ticks) * 100000) / CLK_TCK / Math.max(1, items)) / 100;
    row['postgres CPU ms/req'] = msPer(b.pg - a.pg);
    if (bouncerPid) row['pgbouncer CPU ms/req'] = msPer(b.bouncer - a.bouncer);
    return row;
  };
  let events = 0;
  const connsBefore = bridge.conns.length;
  try {
    const { installationId, appId } = await setupApp(base, adminToken, lark.url);
    const perLevel = Number(process.env.BENCH_CHANNEL_EVENTS ?? 128);
    // BENCH_CHANNEL_CHATS=K spreads the events over K chats (K=1: one busy group chat, whose
    // Durable Object is created once); unset, every event is a new chat and a new object.
    const chats = Number(process.env.BENCH_CHANNEL_CHATS ?? 0);
    const chatOf = (i: number) => (chats > 0 ? i % chats : i);
    const chatLabel = chats > 0 ? `${chats} chat${chats === 1 ? '' : 's'}` : 'one chat each';
    // BENCH_CHANNEL_LEVELS=64 runs one level only (e.g. many events for the process count).
    const levels = (process.env.BENCH_CHANNEL_LEVELS ?? '1,16,64').split(',').map(Number);
    for (const concurrency of levels) {
      const n = Math.max(perLevel, concurrency * 2);
      // Bare /healthz at the same concurrency: the Worker, a fresh pool and `select 1`.
      const healthCpu = await cpuSample();
      const health = await load(n, concurrency, async () => {
        const res = await fetch(`${base}/healthz`);
        await res.arrayBuffer();
        return res.status;
      });
      const healthCost = await cpuSample().then((after) => cpuPer(healthCpu, after, n));
      rows.push({
        suite: 'channel',
        case: `GET /healthz, ${concurrency} concurrent${via}`,
        n,
        'p50 ms': round(percentile(health.latencies, 50)),
        'p99 ms': round(percentile(health.latencies, 99)),
        failures: health.failures,
        ...healthCost,
        load: loadAverage(),
      });
      // Built 100 at a time: thousands of requests at once exhaust the local sockets.
      const deliveries: Delivery[] = [];
      for (let from = 0; from < n; from += 100)
        deliveries.push(
          ...(await Promise.all(
            Array.from({ length: Math.min(100, n - from) }, (_, i) =>
              buildDelivery(lark.url, appId, `bench-${concurrency}-${chatOf(from + i)}`),
            ),
          )),
        );
      await postEvent(base, installationId, await buildDelivery(lark.url, appId, 'warm')); // warm
      const before = bridge.conns.length;
      const backendsBefore = peakBackends;
      peakBackends = 0;
      const profiler =
        inspectorPort && concurrency === Math.max(...levels)
          ? await startCpuProfile(inspectorPort)
          : undefined;
      const hookCpu = await cpuSample();
      const hook = await load(n, concurrency, (i) => postEvent(base, installationId, deliveries[i]!));
      const hookCost = await cpuSample().then((after) => cpuPer(hookCpu, after, n));
      if (peakShape) console.error(`peak backends at ${concurrency} concurrent: ${peakShape}`);
      peakShape = '';
      if (profiler && profileFile) {
        const summary = await profiler.stop(profileFile);
        console.error(`CPU profile of ${concurrency} concurrent events written to ${profileFile}`);
        console.error(JSON.stringify(summary, null, 1));
      }
      events += n + 1;
      const hooks = bridge.conns.slice(before).filter((c) => c.webhook);
      const trips = hooks.reduce((a, c) => a + c.answerTrips, 0);
      const afterTrips = hooks.reduce((a, c) => a + c.trips - c.answerTrips, 0);
      const answerFrames = hooks.reduce((a, c) => a + c.answerFrames, 0);
      const afterFrames = hooks.reduce((a, c) => a + c.frames - c.answerFrames, 0);
      rows.push({
        suite: 'channel',
        case: `webhook answer, ${concurrency} concurrent (signed+encrypted, ${chatLabel}${via})`,
        n,
        'p50 ms': round(percentile(hook.latencies, 50)),
        'p99 ms': round(percentile(hook.latencies, 99)),
        'db round trips/event': round(trips / Math.max(1, hooks.length)),
        'same-connection trips after answer/event': round(afterTrips / Math.max(1, hooks.length)),
        'connects/event': round(hooks.length / n),
        'frames/round trip before answer': round(answerFrames / Math.max(1, trips)),
        'frames/round trip after answer': round(afterFrames / Math.max(1, afterTrips)),
        failures: hook.failures,
        failed: hook.failed,
        'peak backends': `${peakBackends}/${maxConnections}`,
        ...hookCost,
        load: loadAverage(),
      });
      peakBackends = Math.max(peakBackends, backendsBefore);
    }
    // Let the debounced turns (CHANNEL_DEBOUNCE_MS) and their replies finish, then count.
    await new Promise((r) => setTimeout(r, 10_000));
    sampling = false;
    await sampler;
    rows.push({
      suite: 'channel',
      case: `effect_processes rows over ${events} events (${chatLabel}${via}): peak / after the turns`,
      n: events,
      peak: peakProcesses,
      after: await processRows(),
    });
    // Every connection the run opened, by who opened it (its first statement), per event.
    // With their round trips and WebSocket frames (the isolate's CPU follows both: the
    // driver's work per round trip, a native send per frame).
    const openers = new Map<string, ConnStats[]>();
    for (const c of bridge.conns.slice(connsBefore)) {
      const who = c.webhook ? 'webhook answer (installation load)' : opener(c.first);
      openers.set(who, [...(openers.get(who) ?? []), c]);
    }
    openers.delete('healthz'); // its own rows above
    for (const [who, conns] of [...openers].sort((a, b) => b[1].length - a[1].length)) {
      const trips = conns.reduce((a, c) => a + c.trips, 0);
      const frames = conns.reduce((a, c) => a + c.frames, 0);
      rows.push({
        suite: 'channel',
        case: `connections opened by ${who}, per event (whole run, turns included${via})`,
        n: events,
        'connects/event': round(conns.length / events),
        'db round trips/event': round(trips / events),
        'round trips/connection': round(trips / Math.max(1, conns.length)),
        'frames/round trip': round(frames / Math.max(1, trips)),
      });
      if (process.env.BENCH_CHANNEL_FRAMES) {
        const shapes = new Map<string, number>();
        for (const shape of conns.flatMap((c) => c.shapes)) shapes.set(shape, (shapes.get(shape) ?? 0) + 1);
        const top = [...shapes]
          .sort((a, b) => b[1] - a[1])
          .slice(0, Number(process.env.BENCH_CHANNEL_FRAMES) || 12);
        console.error(`frames of ${who} (${conns.length} connections):`);
        for (const [shape, k] of top) console.error(`  ${k}\t${shape}`);
      }
    }
  } finally {
    sampling = false;
    await sampler.catch(() => undefined); // the row above reports; a late sampling error changes nothing
    await db.end();
    worker.stop();
    await lark.close();
    await bridge.close();
    await pgbouncer?.stop();
  }
  return rows;
}

export async function setupApp(base: string, adminToken: string, larkUrl: string) {
  const appId = `cli_bench${randomBytes(4).toString('hex')}`;
  const creds = {
    app_id: appId,
    app_secret: randomBytes(12).toString('hex'),
    verification_token: randomBytes(12).toString('hex'),
    encrypt_key: randomBytes(12).toString('hex'),
  };
  await fetch(`${larkUrl}/__emulator/apps`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(creds),
  });
  const res = await fetch(`${base}/admin/lark/installations`, {
    method: 'POST',
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({ workspace_id: 'ws_bench', ...creds }),
  });
  if (res.status !== 201) throw new Error(`register: ${res.status} ${await res.text()}`);
  const { installation } = (await res.json()) as { installation: { id: string } };
  return { installationId: installation.id, appId };
}

export interface Delivery {
  headers: Record<string, string>;
  body: string;
}

export async function buildDelivery(larkUrl: string, appId: string, chat: string): Promise<Delivery> {
  const res = await fetch(`${larkUrl}/__emulator/events`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      app_id: appId,
      deliver: 'return',
      message: { text: 'hi', chat_id: `oc_${chat}` },
    }),
  });
  return ((await res.json()) as { request: Delivery }).request;
}

export async function postEvent(base: string, installationId: string, d: Delivery): Promise<number> {
  const res = await fetch(`${base}/lark/events/${installationId}`, {
    method: 'POST',
    headers: d.headers,
    body: d.body,
  });
  await res.arrayBuffer();
  return res.status;
}
