// npm run dev: the whole service locally on embedded defaults.
//   Postgres: DATABASE_URL, else an embedded server with data under .local/pg (kept between runs)
//   migrations, the WebSocket bridge for the Neon driver, `wrangler dev` with scheduled testing
//   for both Workers (the main one, and the retention cleanup Worker it reaches through its
//   RETENTION service binding), the Lark emulator (LARK_API_BASE, unless LARK_API_BASE is set), a
//   demo Lark installation and a demo mobile conversation, and a ticker that drives both
//   Workers' crons on their real schedule. The alerts Tail Worker (alerts.wrangler.toml) runs
//   too: its notifications go to ALERT_WEBHOOK_URL when set, else to a local receiver that
//   prints each one as an `[alert]` line.
//   Ports: the service on PORT (8787), the emulator on PORT+1, everything else on free ports.
//   The demos find the stack through .local/dev-stack.json. Ctrl-C stops everything.
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import pg from 'pg';
import { startLarkEmulator } from '../emulator/server';
import { startAlertReceiver } from './lib/alert-receiver';
import { startBridge } from './lib/bridge';
import { setupLarkDemo } from './lib/demo-setup';
import { claimDevStack, devSecrets, LOCAL_DIR } from './lib/dev-stack';
import { migrate } from './lib/migrator';
import { devPorts, ensurePortFree, freePort, portTakenMessage } from './lib/ports';
import { usePostgres, withDatabase } from './lib/postgres';
import { seedMobileDemo } from './lib/seed-mobile';
import { fireStartupPasses, startCronTicker } from './lib/ticker';
import { startWranglerDev } from './lib/wrangler-dev';

const root = fileURLToPath(new URL('..', import.meta.url));
const say = (line: string) => console.log(`[dev] ${line}`);
const fail = (message: string) => console.error(`[dev] ${message}`);

let stack: ReturnType<typeof claimDevStack>;
let ports: ReturnType<typeof devPorts>;
try {
  ports = devPorts();
  stack = claimDevStack();
} catch (err) {
  fail((err as Error).message);
  process.exit(1);
}

async function ensureDatabase(adminUrl: string, name: string): Promise<string> {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  const { rowCount } = await c.query('select 1 from pg_database where datname = $1', [name]);
  if (!rowCount) await c.query(`create database ${name}`);
  await c.end();
  return withDatabase(adminUrl, name);
}

const cleanups: (() => Promise<void> | void)[] = [() => stack.release()];
let stopping = false;
async function shutdown(code: number) {
  if (stopping) return;
  stopping = true;
  say('stopping…');
  for (const fn of cleanups.reverse()) {
    await Promise.resolve()
      .then(fn)
      .catch((err: Error) => fail(`while stopping: ${err.message}`));
  }
  process.exit(code);
}
process.on('SIGINT', () => void shutdown(0));
process.on('SIGTERM', () => void shutdown(0));

/** A listen error as the one line a taken port gets; anything else as its message. */
function oneLine(err: unknown): string {
  const e = err as NodeJS.ErrnoException & { port?: number };
  if (e.code === 'EADDRINUSE' && e.port)
    return portTakenMessage(e.port, e.port === ports.service ? 'service, PORT' : 'Lark emulator, PORT+1');
  return `failed: ${e.message}`;
}

try {
  const useEmulator = !process.env.LARK_API_BASE;
  // Before anything starts: a taken port is the commonest first-run failure.
  await ensurePortFree(ports.service, 'service, PORT');
  if (useEmulator) await ensurePortFree(ports.emulator, 'Lark emulator, PORT+1');

  const server = await usePostgres({
    databaseUrl: process.env.DATABASE_URL,
    dataDir: `${LOCAL_DIR}pg`,
    persistent: true,
  });
  cleanups.push(() => server.stop());
  const databaseUrl = process.env.DATABASE_URL ?? (await ensureDatabase(server.adminUrl, 'reaction_ledger'));
  say(`postgres: ${server.embedded ? `embedded on 127.0.0.1:${server.port} (.local/pg)` : 'DATABASE_URL'}`);
  const applied = await migrate(databaseUrl, { dir: `${root}migrations`, log: (l) => say(l) });
  say(applied.length ? `applied ${applied.length} migration(s)` : 'migrations up to date');

  const bridge = await startBridge();
  cleanups.push(() => bridge.close());
  const secrets = devSecrets();
  // Real Lark cannot be reached from here; with LARK_API_BASE set, the emulator stays off.
  let larkBase = process.env.LARK_API_BASE;
  let emulatorUrl: string | null = null;
  if (useEmulator) {
    const emulator = await startLarkEmulator({ port: ports.emulator });
    cleanups.push(() => emulator.close());
    larkBase = emulatorUrl = emulator.url;
  }

  // Both Workers find each other through a dev registry of this checkout's own (another
  // checkout's Workers have the same names).
  const registryPath = `${LOCAL_DIR}wrangler-registry`;
  // Durable Object state: kept under .wrangler/ between runs; DEV_STATE_DIR moves it (the
  // browser suite starts from a fresh one, so its first maintenance pass runs at once).
  const stateDir = process.env.DEV_STATE_DIR;
  const database = { DATABASE_URL: databaseUrl, NEON_WS_PROXY: `127.0.0.1:${bridge.port}/v2` };
  const startWorker = (name: string, opts: Parameters<typeof startWranglerDev>[0]) => {
    const dev = startWranglerDev(opts);
    cleanups.push(() => dev.stop());
    dev.process.on('exit', (code) => {
      if (!stopping) {
        fail(`wrangler dev (${name}) exited (${code})`);
        void shutdown(1);
      }
    });
  };
  // The alerts Tail Worker (alerts.wrangler.toml) first: both Workers name it in tail_consumers.
  let alertsTo = process.env.ALERT_WEBHOOK_URL;
  if (!alertsTo) {
    const receiver = await startAlertReceiver((line) => console.log(`[alert] ${line}`));
    cleanups.push(() => receiver.close());
    alertsTo = receiver.url;
  }
  startWorker('alerts', {
    root,
    config: 'alerts.wrangler.toml',
    port: await freePort(),
    envFile: `${LOCAL_DIR}alerts.dev.vars`,
    registryPath,
    persistTo: stateDir ? `${stateDir}/alerts-state` : `${root}.wrangler/alerts-state`,
    inspectorPort: await freePort(),
    vars: {
      ALERT_WEBHOOK_URL: alertsTo,
      ...(process.env.ALERT_WEBHOOK_FORMAT ? { ALERT_WEBHOOK_FORMAT: process.env.ALERT_WEBHOOK_FORMAT } : {}),
    },
  });

  // The retention cleanup Worker (retention.wrangler.toml): only the database secrets.
  const retentionPort = await freePort();
  startWorker('retention', {
    root,
    config: 'retention.wrangler.toml',
    port: retentionPort,
    envFile: `${LOCAL_DIR}retention.dev.vars`,
    registryPath,
    // Its own Durable Object state directory: the two workerd processes share no files. Its
    // own inspector port: two wranglers starting together would both pick the first free one.
    persistTo: stateDir ? `${stateDir}/retention-state` : `${root}.wrangler/retention-state`,
    inspectorPort: await freePort(),
    vars: database,
  });

  await ensurePortFree(ports.service, 'service, PORT');
  startWorker('service', {
    root,
    port: ports.service,
    envFile: `${LOCAL_DIR}dev.vars`,
    registryPath,
    ...(stateDir ? { persistTo: `${stateDir}/state` } : {}),
    vars: {
      ...secrets,
      ...database,
      LARK_API_BASE: larkBase!,
      // The echo agent types its answer out to a card reply (npm run demo's streamed reply);
      // a text reply still gets it at once.
      ECHO_AGENT_WORD_MS: process.env.ECHO_AGENT_WORD_MS ?? '120',
      // The echo agent fails a turn with `/fail` in a message (not its re-run): a failed turn to
      // inspect and re-run from the console with no agent service (docs/channel.md "Agents").
      ECHO_AGENT_FAIL_MARKER: process.env.ECHO_AGENT_FAIL_MARKER ?? '/fail',
    },
  });

  const base = `http://127.0.0.1:${ports.service}`;
  const retentionBase = `http://127.0.0.1:${retentionPort}`;
  // Up when it answers at all: the retention Worker has no routes (404 is its answer).
  for (const [name, url] of [
    ['the service', `${base}/healthz`],
    ['the retention Worker', retentionBase],
  ] as const) {
    for (let i = 0; ; i++) {
      const ok = await fetch(url)
        .then((r) => r.ok || r.status === 404)
        // Not listening yet: wrangler is still starting.
        .catch(() => false);
      if (ok) break;
      if (i > 240) throw new Error(`${name} did not come up within 60 s`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  const crons = [
    { baseUrl: base, crons: ['* * * * *'] },
    { baseUrl: retentionBase, crons: ['0 * * * *'] },
  ];
  cleanups.push(startCronTicker(crons, say));
  // What the previous run's Durable Objects still owed (a debounce that came due while the
  // runtime was down): workerd does not fire those alarms, Cloudflare would (lib/ticker.ts).
  await fireStartupPasses(crons, say);
  const lark = emulatorUrl
    ? await setupLarkDemo({ serviceUrl: base, adminToken: secrets.ADMIN_TOKEN, emulatorUrl })
    : null;
  const mobile = await seedMobileDemo(databaseUrl, secrets.ACTOR_JWT_SECRET);
  stack.publish({ serviceUrl: base, emulatorUrl });

  say('ready');
  say(`  service   ${base}   (GET /healthz, /v1/openapi.json)`);
  say(`  console   ${base}/console   (operator console: sign in with the admin token below)`);
  say(`  admin     Authorization: Bearer ${secrets.ADMIN_TOKEN}`);
  say(`            retention enable/stop/rollback: Authorization: Bearer ${secrets.RETENTION_ADMIN_TOKEN}`);
  say(
    lark
      ? `  lark      emulator ${emulatorUrl}; demo installation ${lark.installationId} → npm run demo`
      : `  lark      LARK_API_BASE=${larkBase} (emulator off)`,
  );
  say(`  mobile    actor ${mobile.actorId}, message ${mobile.messageId} in ${mobile.conversationId}`);
  say(`            Authorization: Bearer ${mobile.token}`);
  say('            → npx tsx examples/mobile-client/demo.ts');
  say(`  retention cleanup Worker on ${retentionBase} (no routes; the service reaches it through RETENTION)`);
  say(
    process.env.ALERT_WEBHOOK_URL
      ? '  alerts    alert-class events of both Workers → ALERT_WEBHOOK_URL (deduped, rate-limited)'
      : `  alerts    alert-class events of both Workers → printed here as [alert] lines (local receiver ${alertsTo}; set ALERT_WEBHOOK_URL to send them elsewhere)`,
  );
  say(
    '  crons     driven locally: the service every minute, the retention Worker hourly; Ctrl-C stops everything',
  );
} catch (err) {
  fail(oneLine(err));
  await shutdown(1);
}
