// npm run dev: the whole service locally on embedded defaults.
//   Postgres: DATABASE_URL, else an embedded server with data under .local/pg (kept between runs)
//   migrations, the WebSocket bridge for the Neon driver, `wrangler dev` with scheduled testing,
//   the Lark emulator (LARK_API_BASE, unless LARK_API_BASE is set), a demo Lark installation and a
//   demo mobile conversation, and a ticker that drives the crons on their real schedule.
//   Ctrl-C stops everything.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startLarkEmulator } from '../emulator/server';
import { startBridge } from './lib/bridge';
import { setupLarkDemo } from './lib/demo-setup';
import { acquireDevLock } from './lib/dev-lock';
import { migrate } from './lib/migrator';
import { usePostgres, withDatabase } from './lib/postgres';
import { seedMobileDemo } from './lib/seed-mobile';
import { startCronTicker } from './lib/ticker';

const root = fileURLToPath(new URL('..', import.meta.url));
const local = `${root}.local`;
const port = Number(process.env.PORT ?? 8787);
const emulatorPort = Number(process.env.LARK_EMULATOR_PORT ?? 8790);
const say = (line: string) => console.log(`[dev] ${line}`);

mkdirSync(local, { recursive: true });
let releaseLock: () => void;
try {
  releaseLock = acquireDevLock(`${local}/dev.pid`);
} catch (err) {
  console.error(`[dev] ${(err as Error).message}`);
  process.exit(1);
}

/** Throwaway local secrets, generated once and kept in .local/ so tokens stay stable. */
function localSecrets(): Record<string, string> {
  const path = `${local}/dev-secrets.json`;
  if (existsSync(path)) return JSON.parse(readFileSync(path, 'utf8'));
  const secrets = {
    ADMIN_TOKEN: `dev-admin-${randomBytes(16).toString('hex')}`,
    SECRET_KEYS: JSON.stringify({ '1': randomBytes(32).toString('base64') }),
    ACTOR_JWT_SECRET: randomBytes(32).toString('base64'),
  };
  writeFileSync(path, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  return secrets;
}

async function ensureDatabase(adminUrl: string, name: string): Promise<string> {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  const { rowCount } = await c.query('select 1 from pg_database where datname = $1', [name]);
  if (!rowCount) await c.query(`create database ${name}`);
  await c.end();
  return withDatabase(adminUrl, name);
}

const cleanups: (() => Promise<void> | void)[] = [() => releaseLock()];
let stopping = false;
async function shutdown(code: number) {
  if (stopping) return;
  stopping = true;
  say('stopping…');
  for (const fn of cleanups.reverse()) await Promise.resolve(fn()).catch(() => undefined);
  process.exit(code);
}
process.on('SIGINT', () => void shutdown(0));
process.on('SIGTERM', () => void shutdown(0));

try {
  const server = await usePostgres({
    databaseUrl: process.env.DATABASE_URL,
    dataDir: `${local}/pg`,
    persistent: true,
  });
  cleanups.push(() => server.stop());
  const databaseUrl = process.env.DATABASE_URL ?? (await ensureDatabase(server.adminUrl, 'reaction_ledger'));
  say(`postgres: ${server.embedded ? `embedded on 127.0.0.1:${server.port} (.local/pg)` : 'DATABASE_URL'}`);
  const applied = await migrate(databaseUrl, { dir: `${root}migrations`, log: (l) => say(l) });
  say(applied.length ? `applied ${applied.length} migration(s)` : 'migrations up to date');

  const bridge = await startBridge();
  cleanups.push(() => bridge.close());
  const secrets = localSecrets();
  // Real Lark cannot be reached from here; with LARK_API_BASE set, the emulator stays off.
  let larkBase = process.env.LARK_API_BASE;
  if (!larkBase) {
    const emulator = await startLarkEmulator({ port: emulatorPort });
    cleanups.push(() => emulator.close());
    larkBase = emulator.url;
  }
  const vars: Record<string, string> = {
    ...secrets,
    DATABASE_URL: databaseUrl,
    NEON_WS_PROXY: `127.0.0.1:${bridge.port}/v2`,
    LARK_API_BASE: larkBase,
  };

  const wrangler: ChildProcess = spawn(
    `${root}node_modules/.bin/wrangler`,
    [
      'dev',
      '--local',
      '--test-scheduled',
      '--ip',
      '127.0.0.1',
      '--port',
      String(port),
      ...Object.entries(vars).flatMap(([k, v]) => ['--var', `${k}:${v}`]),
    ],
    {
      cwd: root,
      env: {
        ...process.env,
        WRANGLER_SEND_METRICS: 'false',
        CLOUDFLARE_CF_FETCH_ENABLED: 'false',
        CI: 'true',
      },
      stdio: ['ignore', 'inherit', 'inherit'],
      detached: true,
    },
  );
  cleanups.push(() => {
    if (wrangler.pid && wrangler.exitCode === null) process.kill(-wrangler.pid, 'SIGTERM');
  });
  wrangler.on('exit', (code) => {
    if (!stopping) {
      say(`wrangler dev exited (${code})`);
      void shutdown(1);
    }
  });

  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const ok = await fetch(`${base}/healthz`)
      .then((r) => r.ok)
      .catch(() => false);
    if (ok) break;
    if (i > 240) throw new Error('the Worker did not become healthy within 60 s');
    await new Promise((r) => setTimeout(r, 250));
  }
  cleanups.push(startCronTicker(base, say));
  const lark = await setupLarkDemo({
    serviceUrl: base,
    adminToken: secrets.ADMIN_TOKEN!,
    emulatorUrl: larkBase,
  });
  const mobile = await seedMobileDemo(databaseUrl, secrets.ACTOR_JWT_SECRET!);

  say('ready');
  say(`  service   ${base}   (GET /healthz, /v1/openapi.json)`);
  say(`  admin     Authorization: Bearer ${secrets.ADMIN_TOKEN}`);
  say(`  lark      emulator ${larkBase}; demo installation ${lark.installationId} → npm run demo`);
  say(`  mobile    actor ${mobile.actorId}, message ${mobile.messageId} in ${mobile.conversationId}`);
  say(`            Authorization: Bearer ${mobile.token}`);
  say('  crons     driven locally every minute; Ctrl-C stops everything');
} catch (err) {
  console.error(`[dev] failed: ${(err as Error).message}`);
  await shutdown(1);
}
