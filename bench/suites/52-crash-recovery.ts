import { randomBytes } from 'node:crypto';
import { startLarkEmulator } from '../../emulator/server';
import { startBridge } from '../../scripts/lib/bridge';
import { freePort } from '../../scripts/lib/postgres';
import { fireStartupPasses, startCronTicker } from '../../scripts/lib/ticker';
import { startHoldingAgent } from '../lib/holding-agent';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';
import { untilBadgeAdded, untilTurnSettled, visibleReplies } from '../lib/turn-watch';
import { buildDelivery, postEvent, setupApp, startWorker } from './50-channel';

/**
 * Crash recovery latency (issue 18 item 5, issue 31 item 4), as a user lives it: a Lark
 * message starts a turn and the runtime dies (SIGKILL to the whole `wrangler dev` process
 * group, workerd included) at one of two points: while the reply's agent call is in flight
 * (`agent call`), or right after the typing badge was added, during the debounce, before the
 * turn started (`debounce`). `wrangler dev` starts again on the same Durable Object state;
 * the figures are the time from "healthy again", and from the kill, to the turn's reply
 * delivered (channel_turns.outcome), and every trial checks that the anchor got exactly one
 * reply. The minute cron is driven on its real schedule, as `npm run dev` does, so a runtime
 * that waits for the cron is measured as it would behave. The agent (an HTTP agent in this
 * process) holds generation 1 until the kill in the `agent call` trials and answers every
 * other call at once. Trials per kill point: BENCH_CRASH_TRIALS (default 3).
 */
export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const bridge = await startBridge();
  const lark = await startLarkEmulator({ rateLimits: false });
  const agent = await startHoldingAgent();
  const agentUrl = agent.url;
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const adminToken = `bench-admin-${randomBytes(12).toString('hex')}`;
  const vars = {
    DATABASE_URL: stack.databaseUrl,
    NEON_WS_PROXY: stack.wsProxy,
    ADMIN_TOKEN: adminToken,
    SECRET_KEYS: JSON.stringify({ '1': randomBytes(32).toString('base64') }),
    LARK_API_BASE: lark.url,
    AGENT_URL: agentUrl,
    AGENT_SIGNING_SECRET: randomBytes(24).toString('hex'),
    LOG_LEVEL: 'error',
  };
  const db = stack.pg(1);
  const trials = Number(process.env.BENCH_CRASH_TRIALS ?? 3);
  const points = ['agent call', 'debounce'] as const;
  const restartToReply = new Map<string, number[]>(points.map((p) => [p, []]));
  const killToReply = new Map<string, number[]>(points.map((p) => [p, []]));
  let worker = await startWorker(vars, port);
  const stopTicker = startCronTicker([{ baseUrl: base, crons: ['* * * * *'] }], () => undefined);
  const loads: string[] = [];
  try {
    const { installationId, appId } = await setupApp(base, adminToken, lark.url);
    for (let t = 0; t < trials * points.length; t++) {
      const point = points[t % points.length]!;
      agent.holdFirst = point === 'agent call';
      const chat = `crash-${t}-${randomBytes(3).toString('hex')}`;
      const inFlight = new Promise<void>((r) => {
        agent.firstCallSeen = r;
      });
      const mark = lark.calls.length;
      const status = await postEvent(base, installationId, await buildDelivery(lark.url, appId, chat));
      if (status !== 200) throw new Error(`event answered ${status}`);
      if (point === 'agent call')
        await inFlight; // the reply effect is claimed, its agent call waits
      // The badge is on the message and the debounce runs: the turn has not started.
      else await untilBadgeAdded(lark, mark);
      const killedAt = performance.now();
      const pid = worker.process.pid!;
      process.kill(-pid, 'SIGKILL');
      await new Promise<void>((r) =>
        worker.process.exitCode !== null ? r() : worker.process.once('exit', () => r()),
      );
      agent.releaseHeld(); // the dead runtime's socket is gone anyway
      worker = await startWorker(vars, port, { keepState: true });
      const restartedAt = performance.now();
      // As a restarted `npm run dev` does (scripts/dev.ts): the passes the dead runtime owed.
      void fireStartupPasses([{ baseUrl: base, crons: ['* * * * *'] }], () => undefined);
      await untilTurnSettled(db, chat, {
        since: restartedAt,
        limitMs: 180_000,
        stepMs: 200,
        what: `${point}, after the restart`,
      });
      restartToReply.get(point)!.push(performance.now() - restartedAt);
      killToReply.get(point)!.push(performance.now() - killedAt);
      // At most one reply per turn, whatever the crash: one visible reply on the anchor.
      const replies = visibleReplies(lark, mark);
      if (replies !== 1) throw new Error(`${point}: the turn got ${replies} visible replies`);
      loads.push(
        (await import('node:fs')).readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' '),
      );
    }
  } finally {
    stopTicker();
    worker.stop();
    agent.close();
    await db.end();
    await lark.close();
    await bridge.close();
  }
  const row = (what: string, xs: number[], load?: string): BenchRow => ({
    suite: 'crash-recovery',
    case: `runtime killed mid-turn, restarted: ${what} (s, each trial)`,
    n: trials,
    'trials s': xs.map((x) => (x / 1000).toFixed(1)).join(' / '),
    'max s': round(Math.max(...xs) / 1000, 1),
    'p50 s': round(percentile(xs, 50) / 1000, 1),
    ...(load ? { load } : {}),
  });
  return points.flatMap((p) => [
    row(`${p}: restart → reply`, restartToReply.get(p)!, loads.join(' → ')),
    row(`${p}: kill → reply`, killToReply.get(p)!),
  ]);
}
