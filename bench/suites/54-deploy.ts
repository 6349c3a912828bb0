import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startLarkEmulator } from '../../emulator/server';
import { startBridge } from '../../scripts/lib/bridge';
import { freePort } from '../../scripts/lib/postgres';
import { releaseTree } from '../../scripts/lib/previous-release';
import { fireStartupPasses, startCronTicker } from '../../scripts/lib/ticker';
import { startWranglerDev, type WranglerDev } from '../../scripts/lib/wrangler-dev';
import { startHoldingAgent } from '../lib/holding-agent';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';
import { untilBadgeAdded, untilTurnSettled, visibleReplies } from '../lib/turn-watch';
import { buildDelivery, postEvent, setupApp } from './50-channel';

const ROOT = new URL('../../', import.meta.url).pathname;

/**
 * A deploy mid-turn (issue 31 item 4), as the platform does it: the runtime running one release
 * stops and the same Durable Objects, with their storage and alarms, come back running the other
 * release's code. Both directions: a deploy (the previous release, scripts/previous-release.json,
 * then this tree's) and a rollback (this tree's, then the previous one). Each release runs under
 * its own `wrangler dev` (Miniflare) from its own source tree, on one Durable Object state
 * directory and the bench database; the old one is stopped with SIGTERM (a deploy, not a kill),
 * at two points of a turn: while the reply's agent call is in flight (`agent call`: the agent
 * holds generation 1 until the old runtime is gone) and right after the typing badge was added,
 * during the debounce, before the turn started (`debounce`). The minute cron runs on its real
 * schedule. At the restart the minute passes run once, as `npm run dev` does (scripts/dev.ts):
 * workerd never fires an alarm that came due while it was down, where Cloudflare runs the
 * overdue alarm (docs/effects.md "Restarts and deploys"). Each trial checks that the anchor got
 * exactly one visible reply. Trials per direction and point: BENCH_DEPLOY_TRIALS (default 2).
 */
export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const tree = await releaseTree();
  const bridge = await startBridge();
  const lark = await startLarkEmulator({ rateLimits: false });
  const stateRoot = await mkdtemp(join(tmpdir(), 'reaction-ledger-bench-deploy-'));
  const agent = await startHoldingAgent();
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const adminToken = `bench-admin-${randomBytes(12).toString('hex')}`;
  const vars = {
    DATABASE_URL: stack.databaseUrl,
    NEON_WS_PROXY: `127.0.0.1:${bridge.port}/v2`,
    ADMIN_TOKEN: adminToken,
    SECRET_KEYS: JSON.stringify({ '1': randomBytes(32).toString('base64') }),
    LARK_API_BASE: lark.url,
    AGENT_URL: agent.url,
    AGENT_SIGNING_SECRET: randomBytes(24).toString('hex'),
    LOG_LEVEL: 'error',
  };
  const releases = { previous: `${tree.root.replace(/\/$/, '')}/`, current: ROOT };
  /** One release's wrangler dev on the trial's state directory, once it answers /healthz. */
  async function boot(root: string, persistTo: string): Promise<WranglerDev> {
    const dev = startWranglerDev({
      root,
      port,
      config: 'wrangler.toml',
      vars,
      envFile: `${ROOT}.local/bench-deploy.vars`,
      persistTo,
      quiet: true,
    });
    for (let i = 0; i < 240; i++) {
      if (
        await fetch(`${base}/healthz`).then(
          (r) => r.ok,
          () => false,
        )
      )
        return dev;
      await new Promise((r) => setTimeout(r, 250));
    }
    dev.stop();
    throw new Error(`wrangler dev (${root}) did not become healthy`);
  }
  async function stop(dev: WranglerDev): Promise<void> {
    dev.stop();
    await new Promise<void>((r) =>
      dev.process.exitCode !== null ? r() : dev.process.once('exit', () => r()),
    );
  }
  const db = stack.pg(1);
  const trials = Number(process.env.BENCH_DEPLOY_TRIALS ?? 2);
  const directions = [
    { name: 'deploy (previous → this release)', from: releases.previous, to: releases.current },
    { name: 'rollback (this → previous release)', from: releases.current, to: releases.previous },
  ];
  const points = ['agent call', 'debounce'] as const;
  const rows: BenchRow[] = [];
  let worker: WranglerDev | null = null;
  const stopTicker = startCronTicker([{ baseUrl: base, crons: ['* * * * *'] }], () => undefined);
  try {
    for (const dir of directions) {
      for (const point of points) {
        const toReply: number[] = [];
        const fromDeploy: number[] = [];
        for (let t = 0; t < trials; t++) {
          // Each trial on fresh object storage: the deploy is the only disruption it sees.
          const persistTo = await mkdtemp(join(stateRoot, 'state-'));
          worker = await boot(dir.from, persistTo);
          const { installationId, appId } = await setupApp(base, adminToken, lark.url);
          agent.holdFirst = point === 'agent call';
          const chat = `deploy-${t}-${randomBytes(3).toString('hex')}`;
          const inFlight = new Promise<void>((r) => {
            agent.firstCallSeen = r;
          });
          const mark = lark.calls.length;
          const status = await postEvent(base, installationId, await buildDelivery(lark.url, appId, chat));
          if (status !== 200) throw new Error(`event answered ${status}`);
          if (point === 'agent call') await inFlight;
          else await untilBadgeAdded(lark, mark);
          const deployedAt = performance.now();
          await stop(worker);
          agent.releaseHeld();
          worker = await boot(dir.to, persistTo);
          const servingAt = performance.now();
          void fireStartupPasses([{ baseUrl: base, crons: ['* * * * *'] }], () => undefined);
          await untilTurnSettled(db, chat, {
            since: servingAt,
            limitMs: 180_000,
            stepMs: 100,
            what: `${dir.name}, ${point}, after the deploy`,
          });
          toReply.push(performance.now() - servingAt);
          fromDeploy.push(performance.now() - deployedAt);
          const replies = visibleReplies(lark, mark);
          if (replies !== 1)
            throw new Error(`${dir.name}, ${point}: the turn got ${replies} visible replies`);
          await stop(worker);
          worker = null;
        }
        rows.push({
          suite: 'deploy',
          case: `${dir.name} mid-turn, at the ${point}: new version serving → reply (s, each trial)`,
          n: trials,
          'trials s': toReply.map((x) => (x / 1000).toFixed(1)).join(' / '),
          'max s': round(Math.max(...toReply) / 1000, 1),
          'p50 s': round(percentile(toReply, 50) / 1000, 1),
          'old stopped → reply, max s': round(Math.max(...fromDeploy) / 1000, 1),
          target: '≤ 5 s (+ the debounce)',
        });
      }
    }
  } finally {
    stopTicker();
    if (worker) await stop(worker);
    agent.close();
    await db.end();
    await lark.close();
    await bridge.close();
    await rm(stateRoot, { recursive: true, force: true });
    await tree.remove();
  }
  return rows;
}
