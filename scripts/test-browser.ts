// npm run test:browser: the operator console (/console) in a real browser. Starts its own
// `npm run dev` stack (scripts/dev.ts) on a fresh database and free ports, seeds it with the
// demos (scripts/demo.ts: Lark messages, badges, a turn and its reply; the mobile client demo:
// tickets and answers), one failing Lark withdrawal (emulator fault) and one dead-lettered
// message, and a turn the dev echo agent fails on demand (a `/fail` message, ECHO_AGENT_FAIL_MARKER),
// then drives Debian's Chromium (/usr/bin/chromium, CHROMIUM_PATH to override)
// through playwright-core: a wrong token and a missing CSRF token are refused, sign-in works,
// every panel renders with data, a chart has points, stop then enable round-trips, a bulk
// dead-letter preview then its requeue, the failed turn found in the inspector and re-run
// (confirmed, CSRF-guarded), its re-run delivered. One
// screenshot per panel (and the whole page) goes to test-results/console-*.png. Exit code 1 on
// any failure. Refuses to run while this checkout's `npm run dev` is up (one stack per checkout).
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import pg from 'pg';
import { chromium, type Page } from 'playwright-core';
import { setupLarkDemo } from './lib/demo-setup';
import { devSecrets, findDevStack } from './lib/dev-stack';
import { ensurePortFree, freePort } from './lib/ports';
import { adminQuery, usePostgres, withDatabase } from './lib/postgres';

const root = fileURLToPath(new URL('..', import.meta.url));
const results = join(root, 'test-results');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const say = (line: string) => console.log(`[browser] ${line}`);
const started = Date.now();
const children: ChildProcess[] = [];
const cleanups: (() => Promise<void> | void)[] = [];

function check(ok: unknown, what: string): void {
  if (!ok) throw new Error(`FAILED: ${what}`);
  say(`ok  ${what}`);
}

async function until<T>(what: string, read: () => Promise<T | null | undefined | false>, timeoutMs = 45_000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await read().catch(() => null);
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** A child whose output is kept and shown only when something fails. */
function run(args: string[], env: Record<string, string>, timeoutMs: number): Promise<number> {
  const child = spawn(process.execPath, ['--import', 'tsx', ...args], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const timer = setTimeout(() => child.kill('SIGINT'), timeoutMs);
  return new Promise((resolve) =>
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code !== 0) console.log(out);
      resolve(code ?? 1);
    }),
  );
}

/** A free port whose next one is free too: the service on PORT, the emulator on PORT+1. */
async function portPair(): Promise<number> {
  for (;;) {
    const p = await freePort();
    if (
      p < 65534 &&
      (await ensurePortFree(p + 1, 'emulator').then(
        () => true,
        () => false,
      ))
    )
      return p;
  }
}

async function startStack(databaseUrl: string) {
  const port = await portPair();
  // Fresh Durable Object state too (the developer's .wrangler/state is left alone).
  const stateDir = mkdtempSync(join(tmpdir(), 'console-wrangler-'));
  cleanups.push(() => rmSync(stateDir, { recursive: true, force: true }));
  const dev = spawn(process.execPath, ['--import', 'tsx', 'scripts/dev.ts'], {
    cwd: root,
    env: { ...process.env, PORT: String(port), DATABASE_URL: databaseUrl, DEV_STATE_DIR: stateDir },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: false,
  });
  children.push(dev);
  let log = '';
  let consoleUrl: string | null = null;
  dev.stdout!.on('data', (d: Buffer) => {
    log += d;
    consoleUrl ??= /\[dev\]\s+console\s+(\S+)/.exec(log)?.[1] ?? null;
  });
  dev.stderr!.on('data', (d) => (log += d));
  const exited = new Promise<number>((r) => dev.on('exit', (code) => r(code ?? 1)));
  cleanups.push(async () => {
    if (dev.exitCode === null) {
      dev.kill('SIGINT');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
    }
  });
  const ready = await Promise.race([
    until('npm run dev to be ready', async () => /\[dev\] ready/.test(log) && consoleUrl !== null, 150_000),
    exited.then((code) => {
      throw new Error(`npm run dev exited (${code}):\n${log}`);
    }),
  ]).catch((err: Error) => {
    console.log(log);
    throw err;
  });
  void ready;
  return { base: `http://127.0.0.1:${port}`, consoleUrl: consoleUrl! };
}

/** What the inspector searches for: the demo's chat, within its installation. */
interface Found {
  chatId: string;
  installationId: string;
}

/** The chat whose turn the dev echo agent fails (its `/fail` message): the re-run's. */
const FAIL_CHAT = 'oc_browserrerun';

/** The seed: the two demos, a failing withdrawal, a dead letter, a failing turn, one maintenance run. */
async function seed(base: string, db: pg.Client): Promise<Found> {
  check((await run(['scripts/demo.ts'], {}, 60_000)) === 0, 'npm run demo: badges on, reply, badges gone');
  check(
    (await run(['examples/mobile-client/demo.ts'], {}, 60_000)) === 0,
    'mobile demo: tickets issued and answered',
  );
  const stack = findDevStack();
  const emulator = stack.emulatorUrl!;
  const lark = await setupLarkDemo({
    serviceUrl: base,
    adminToken: devSecrets().ADMIN_TOKEN,
    emulatorUrl: emulator,
  });
  // Lark fails every reaction delete for a while: the turn's withdrawal fails and is recorded.
  await fetch(`${emulator}/__emulator/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ route: 'reactions.delete', kind: '5xx', times: 20 }),
  });
  await fetch(`${emulator}/__emulator/events`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      app_id: lark.appId,
      deliver: 'post',
      url: lark.webhookUrl,
      message: { text: 'this badge will not come off at once', chat_id: lark.chatId, chat_type: 'group' },
    }),
  });
  await until(
    'a failed Open API call to be recorded',
    async () => (await db.query('select 1 from lark_api_errors')).rowCount,
  );
  await fetch(`${emulator}/__emulator/faults`, { method: 'DELETE' });
  // A turn that fails: `npm run dev`'s echo agent fails a turn with `/fail` in a message
  // (ECHO_AGENT_FAIL_MARKER), every generation (about 5 s), while the rest is seeded and driven.
  await fetch(`${emulator}/__emulator/events`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      app_id: lark.appId,
      deliver: 'post',
      url: lark.webhookUrl,
      message: { text: 'please answer /fail', chat_id: FAIL_CHAT, chat_type: 'group' },
    }),
  });
  // A dead-lettered message (the drain dead-letters after 5 failed deliveries; seeded directly).
  await db.query(
    `with i as (insert into actor_instances (id, actor_type, actor_key) values ('console-seed', 'console-seed', 'one')
                on conflict (id) do update set actor_key = excluded.actor_key returning id)
     insert into actor_mailbox (instance_id, message_key, payload, state, attempts, last_error, dead_at_ms)
     select id, 'seed:poison', '{}'::jsonb, 'dead', 5, 'Error: seeded handler failure', app_now_ms() from i
     on conflict do nothing`,
  );
  // Three dead letters of one installation's conversation, for the bulk actions.
  await db.query(
    `with c as (insert into channel_conversations (id, installation_id, workspace_id, app_id, chat_id)
                values ('console-bulk-seed', '${BULK_INSTALLATION}', 'ws_bulk', 'cli_bulk', 'oc_bulk') returning id),
     i as (insert into actor_instances (id, actor_type, actor_key) select id, 'console-seed', id from c returning id)
     insert into actor_mailbox (instance_id, message_key, payload, state, attempts, last_error, dead_at_ms)
     select i.id, 'seed:bulk:' || g, '{}'::jsonb, 'dead', 5, 'Error: seeded handler failure', app_now_ms()
       from i, generate_series(1, 3) g`,
  );
  // The minute cron keeps the maintenance alarm armed; its first pass runs at once.
  await fetch(`${base}/cdn-cgi/handler/scheduled?cron=*+*+*+*+*`);
  await until(
    'a maintenance run to be recorded',
    async () => (await db.query('select 1 from typing_maintenance_runs')).rowCount,
  );
  return { chatId: lark.chatId, installationId: lark.installationId };
}

/** The conversation inspector: found by chat id, one timeline, screenshot. */
async function inspector(page: Page, consoleUrl: string, { chatId, installationId }: Found) {
  await page.goto(consoleUrl);
  await Promise.all([page.waitForURL(/\/console\/inspect$/), page.click('[data-testid="inspect-link"]')]);
  await page.fill('#installation', installationId);
  await page.fill('#q', chatId);
  await Promise.all([
    page.waitForURL(/\/console\/inspect\?installation=li_[^&]+&q=/),
    page.click('[data-testid="inspect-search"] button'),
  ]);
  check(
    (await page.locator('[data-testid="inspect-matches"] tr').count()) > 1,
    'inspector: the chat is found',
  );
  for (const kind of ['input', 'turn', 'badge', 'effect'])
    check(
      (await page.locator(`[data-testid="inspect-timeline"] tr[data-kind="${kind}"]`).count()) > 0,
      `inspector: the timeline shows the conversation's ${kind} rows`,
    );
  await page.locator('#panel-inspect').screenshot({ path: join(results, 'console-inspect.png') });
}

/** The `/fail` chat's turn, failed, re-run from the inspector (confirmed, CSRF-guarded): delivered. */
async function rerun(page: Page, consoleUrl: string, db: pg.Client, installationId: string) {
  const turnOf = (outcome: string, rerunOf: boolean) =>
    db.query<{ turn_no: number; delivery_key: string; reply_message_id: string | null }>(
      `select t.turn_no, t.delivery_key, t.reply_message_id
         from channel_turns t join channel_conversations c on c.id = t.session_id
        where c.chat_id = $1 and t.outcome = $2 and (t.rerun_of is not null) = $3
        order by t.turn_no limit 1`,
      [FAIL_CHAT, outcome, rerunOf],
    );
  const failed = await until(
    'the /fail turn to end failed',
    async () => (await turnOf('failed', false)).rows[0],
  );
  await page.goto(`${consoleUrl}/inspect?installation=${installationId}&q=${FAIL_CHAT}`);
  const form = page.locator(
    `#panel-inspect form[data-action="turn-rerun"]:has(input[value="${failed.delivery_key}"])`,
  );
  check((await form.count()) === 1, `inspector: the failed turn ${failed.turn_no} offers Re-run`);
  await page.locator('#panel-inspect').screenshot({ path: join(results, 'console-rerun-failed.png') });
  await form.locator('input[name=confirm]').check();
  await Promise.all([page.waitForURL(/\/console(#.*)?$/), form.locator('button[type=submit]').click()]);
  check(
    /turn-rerun/.test((await page.locator('#panel-audit').textContent()) ?? ''),
    'the re-run is in the audit panel',
  );
  const delivered = await until(
    'the re-run to be delivered',
    async () => (await turnOf('delivered', true)).rows[0],
  );
  check(delivered.reply_message_id, `the re-run, turn ${delivered.turn_no}, posted a reply`);
  await page.goto(`${consoleUrl}/inspect?installation=${installationId}&q=${FAIL_CHAT}`);
  const timeline = (await page.locator('[data-testid="inspect-timeline"]').textContent()) ?? '';
  check(
    timeline.includes(`a re-run of turn ${failed.turn_no}`) &&
      timeline.includes(`turn ${delivered.turn_no} delivered`),
    'inspector: the re-run and its delivery are on the timeline',
  );
  check(
    (await page.locator('#panel-inspect form[data-action="turn-rerun"]').count()) === 0,
    'inspector: no re-run offered once it is re-run',
  );
  await page.locator('#panel-inspect').screenshot({ path: join(results, 'console-rerun-delivered.png') });
}

/** Pause, then resume (answering the backlog), from the Lark panel; both audited. */
async function pauseResume(page: Page, consoleUrl: string) {
  await page.goto(consoleUrl);
  await act(page, 'lark', 'installation-pause');
  check(
    (await page.locator('#panel-lark form[data-action="installation-resume"]').count()) > 0,
    'pause: the installation offers Resume',
  );
  await page.locator('#panel-lark').screenshot({ path: join(results, 'console-paused.png') });
  await act(page, 'lark', 'installation-resume');
  const audit = (await page.locator('#panel-audit').textContent()) ?? '';
  check(
    /installation-pause/.test(audit) && /installation-resume/.test(audit),
    'pause and resume are audited',
  );
}

const BULK_INSTALLATION = 'li_browserbulk';

/** Dead letters in bulk: the preview shows the count, its confirmed requeue changes the page. */
async function bulkDeadLetters(page: Page) {
  const form = page.locator('#panel-effects form[data-action="dead-bulk-preview"]');
  await form.locator('input[name=installation]').fill(BULK_INSTALLATION);
  await form.locator('input[name=confirm]').check();
  await Promise.all([page.waitForURL(/dead-bulk-preview$/), form.locator('button[type=submit]').click()]);
  check(
    (await page.locator('[data-testid="bulk-count"]').textContent()) === '3',
    'bulk preview: 3 dead letters counted, nothing changed',
  );
  await page.locator('#panel-bulk').screenshot({ path: join(results, 'console-bulk-preview.png') });
  const requeue = page.locator('#panel-bulk form[data-action="dead-bulk-requeue"]');
  await requeue.locator('input[name=confirm]').check();
  await Promise.all([page.waitForURL(/dead-bulk-requeue$/), requeue.locator('button[type=submit]').click()]);
  check(
    (await page.locator('[data-testid="bulk-changed"]').textContent()) === '3',
    'bulk requeue: the previewed page of 3 requeued',
  );
  await page.locator('#panel-bulk').screenshot({ path: join(results, 'console-bulk-requeue.png') });
  await page.goto(page.url().replace(/\/console\/actions\/.*$/, '/console'));
  const audit = (await page.locator('#panel-audit').textContent()) ?? '';
  check(
    /dead-bulk-preview/.test(audit) && /dead-bulk-requeue/.test(audit),
    'both bulk actions are in the audit panel',
  );
}

async function csrfMissingRefused(page: Page) {
  // The form's hidden token removed by hand, then submitted as the browser would.
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.url().includes('/console/actions/') && r.request().method() === 'POST'),
    // A string: this runs in the page (the project's tsconfig has no DOM types).
    page.evaluate(`(() => {
      const f = document.querySelector('#panel-typing form.act');
      f.querySelector('input[name=csrf]').remove();
      f.querySelector('input[name=confirm]').checked = true;
      f.submit();
    })()`),
  ]);
  check(response.status() === 403, `an action without its CSRF token is refused (${response.status()})`);
  await page.waitForSelector('[data-code]');
  check((await page.locator('[data-code="csrf_invalid"]').count()) === 1, 'the refusal names csrf_invalid');
}

async function act(page: Page, panel: string, name: string) {
  const form = page.locator(`#panel-${panel} form[data-action="${name}"]`);
  await form.locator('input[name=confirm]').check();
  await Promise.all([page.waitForURL(/\/console(#.*)?$/), form.locator('button[type=submit]').click()]);
}

async function drive(consoleUrl: string, found: Found, db: pg.Client) {
  const profile = mkdtempSync(join(tmpdir(), 'console-chromium-'));
  cleanups.push(() => rmSync(profile, { recursive: true, force: true }));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1400, height: 1000 },
  });
  cleanups.push(() => context.close());
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
  const secrets = devSecrets();

  await page.goto(consoleUrl);
  await page.fill('#operator', 'browser-test');
  await page.fill('#token', `${secrets.ADMIN_TOKEN}-wrong`);
  const [wrong] = await Promise.all([
    page.waitForResponse(/\/console\/login$/),
    page.click('button[type=submit]'),
  ]);
  check(wrong.status() === 401, `a wrong admin token is refused (${wrong.status()})`);
  check(
    (await page.locator('[data-code="unauthorized"]').count()) === 1,
    'the sign-in page says unauthorized',
  );

  await page.fill('#operator', 'browser-test');
  await page.fill('#token', secrets.ADMIN_TOKEN);
  await Promise.all([page.waitForURL(/\/console$/), page.click('button[type=submit]')]);
  const cookie = (await context.cookies()).find((c) => c.name === 'rl_console');
  check(
    cookie?.httpOnly && cookie.sameSite === 'Strict' && cookie.path === '/console',
    'signed in: HttpOnly, SameSite=Strict session cookie',
  );
  const html = await page.content();
  check(
    !html.includes(secrets.ADMIN_TOKEN) && !html.includes(secrets.RETENTION_ADMIN_TOKEN),
    'no token in the page',
  );

  const rows = (panel: string) => page.locator(`#panel-${panel} table tr`).count();
  check((await rows('typing')) > 1, 'typing badges: a workspace row and maintenance passes');
  check(
    (await page.locator('#panel-typing td', { hasText: /^demo/ }).count()) + (await rows('typing')) > 2,
    'typing panel has data',
  );
  check((await rows('effects')) > 1, 'effects: processes and the dead letter');
  check(
    (await page.locator('#panel-effects td', { hasText: 'seed:poison' }).count()) === 1,
    'effects: the dead-lettered message is listed',
  );
  check(
    (await page.locator('#panel-lark td', { hasText: /^code 0 \(HTTP 500\)/ }).count()) >= 1,
    'lark: the last Open API error is shown',
  );
  check(
    (await page.locator('#panel-retention [data-testid="retention-state"]').count()) === 1,
    'retention: state, generation, budgets',
  );
  const issued = Number(await page.locator('#panel-tickets [data-testid="tickets-issued"]').textContent());
  check(issued > 0, `mobile tickets: ${issued} issued in the last 24 h`);
  const points = await page.locator('svg.chart rect.pt[height]:not([height="0.0"])').count();
  check(points > 0, `charts have points (${points} bars)`);
  const ticketPoints = Number(
    await page.locator('#panel-tickets svg.chart').first().getAttribute('data-points'),
  );
  check(ticketPoints > 0, 'the tickets-issued chart has a point');

  mkdirSync(results, { recursive: true });
  for (const panel of ['typing', 'effects', 'lark', 'retention', 'tickets', 'audit'])
    await page.locator(`#panel-${panel}`).screenshot({ path: join(results, `console-${panel}.png`) });

  await act(page, 'typing', 'typing-stop');
  check(
    (await page.locator('[data-testid="typing-state"]').textContent()) === 'stopped',
    'stop: the maintenance shows stopped',
  );
  await act(page, 'typing', 'typing-enable');
  check(
    (await page.locator('[data-testid="typing-state"]').textContent()) === 'enabled',
    'enable: the maintenance shows enabled',
  );
  const audit = (await page.locator('#panel-audit').textContent()) ?? '';
  check(/typing-stop/.test(audit) && /typing-enable/.test(audit), 'both actions are in the audit panel');
  await page.locator('#panel-audit').screenshot({ path: join(results, 'console-audit.png') });
  await page.screenshot({ path: join(results, 'console.png'), fullPage: true });

  await bulkDeadLetters(page);
  await inspector(page, consoleUrl, found);
  await rerun(page, consoleUrl, db, found.installationId);
  await pauseResume(page, consoleUrl);
  await csrfMissingRefused(page);
}

let status = 0;
try {
  check(
    await import('node:fs').then((fs) => fs.existsSync(CHROMIUM)),
    `Chromium at ${CHROMIUM} (apt-get install chromium)`,
  );
  const server = await usePostgres({
    databaseUrl: process.env.DATABASE_URL,
    dataDir: mkdtempSync(join(tmpdir(), 'console-pg-')),
    persistent: false,
  });
  cleanups.push(() => server.stop());
  const name = `reaction_ledger_browser_${process.pid}`;
  await adminQuery(server.adminUrl, `create database ${name}`);
  cleanups.push(() => adminQuery(server.adminUrl, `drop database if exists ${name} with (force)`));
  const databaseUrl = withDatabase(server.adminUrl, name);
  const { base, consoleUrl } = await startStack(databaseUrl);
  say(`stack up in ${Math.round((Date.now() - started) / 1000)} s: ${consoleUrl}`);
  const db = new pg.Client({ connectionString: databaseUrl, statement_timeout: 5000 });
  await db.connect();
  cleanups.push(() => db.end());
  const found = await seed(base, db);
  say(`seeded in ${Math.round((Date.now() - started) / 1000)} s`);
  await drive(consoleUrl, found, db);
  say(`passed in ${Math.round((Date.now() - started) / 1000)} s; screenshots in test-results/console-*.png`);
} catch (err) {
  console.error(`[browser] ${(err as Error).stack ?? err}`);
  status = 1;
}
for (const fn of cleanups.reverse())
  await Promise.resolve()
    .then(fn)
    .catch((err: Error) => say(`cleanup: ${err.message}`));
process.exit(status);
