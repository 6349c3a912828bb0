// npm run capacity -- [--eps 20] [--workspaces 10] [--latency-ms 200] [--failure-rate 0.05]
//                     [--duration-s 180] [--pass-interval-s 30] [--turn-ms 3000]
// Capacity validation before rollout (spec "Retry and retention limits"): drives a workload of
// incoming messages through the real ledger (registerInput → Add → settle → after-commit
// withdrawal) against a local stack (fresh database + the Lark emulator with latency and a
// failure rate), runs the REAL maintenance passes every pass interval, and reports whether the
// due-retry backlog, overdue-redaction and abandonment counts stay flat. Exit code 1 = not flat.
import { parseArgs } from 'node:util';
import type { Pool } from '@neondatabase/serverless';
import { startLarkEmulator } from '../emulator/server';
import { withTx } from '../workers/db/tx';
import {
  addTypingBadge,
  type Registration,
  registerInput,
  settleTurnInputs,
  withdrawAfterCommit,
} from '../workers/typing-ledger';
import { runMaintenancePasses } from '../workers/typing-ledger/maintenance-passes';
import { startBenchStack } from './lib/stack';

const { values: a } = parseArgs({
  options: {
    eps: { type: 'string', default: '20' },
    workspaces: { type: 'string', default: '10' },
    'latency-ms': { type: 'string', default: '200' },
    'failure-rate': { type: 'string', default: '0.05' },
    'duration-s': { type: 'string', default: '180' },
    'pass-interval-s': { type: 'string', default: '30' },
    'turn-ms': { type: 'string', default: '3000' },
  },
});
const eps = Number(a.eps);
const workspaces = Number(a.workspaces);
const latencyMs = Number(a['latency-ms']);
const failureRate = Number(a['failure-rate']);
const durationS = Number(a['duration-s']);
const passIntervalS = Number(a['pass-interval-s']);
const turnMs = Number(a['turn-ms']);
const KEYS = { '1': Buffer.from('0123456789abcdef0123456789abcdef').toString('base64') };

const stack = await startBenchStack();
const lark = await startLarkEmulator({ rateLimits: false });
const pool = stack.neon(40) as unknown as Pool;
const post = (path: string, body: unknown) =>
  fetch(`${lark.url}/__emulator/${path}`, { method: 'POST', body: JSON.stringify(body) }).then((r) =>
    r.json(),
  );

interface Sample {
  t: number;
  pending: number;
  dueBacklog: number;
  overdue: number;
  abandoned: number;
  passMs: number;
  retryClaimed: number;
  retryDeferred: number;
}
const samples: Sample[] = [];
let events = 0;
let skipped = 0;
const inflight = new Set<Promise<unknown>>();
const track = (p: Promise<unknown>) => {
  inflight.add(p);
  p.finally(() => inflight.delete(p));
};

try {
  const insts: { id: string; workspaceId: string; appId: string; apiBase: string; appSecret: string }[] = [];
  for (let w = 0; w < workspaces; w++) {
    const appId = `cli_cap${w}`;
    await post('apps', { app_id: appId, app_secret: `cap-secret-${w}`, verification_token: 'vt' });
    insts.push({
      id: `inst_cap${w}`,
      workspaceId: `ws_cap${w}`,
      appId,
      apiBase: lark.url,
      appSecret: `cap-secret-${w}`,
    });
  }
  if (latencyMs) lark.faults.add({ route: '*', kind: 'latency', latencyMs, times: 1e9 });

  const oneEvent = async (seq: number) => {
    const inst = insts[seq % insts.length]!;
    const { message_id: messageId } = (await post('messages', { text: 'cap' })) as { message_id: string };
    const sessionId = `cap_s${seq}`;
    const reg: Registration = await withTx(pool, { budgetMs: 3000 }, (tx) =>
      registerInput(tx, KEYS, {
        installation: inst,
        sessionId,
        messageId,
        inputPosition: 1,
        contextRevision: 0,
        receivedAtMs: Date.now(),
      }),
    );
    if (reg.kind !== 'registered') {
      skipped++;
      return;
    }
    await addTypingBadge(pool, reg);
    await new Promise((r) => setTimeout(r, turnMs));
    const ids = await withTx(pool, { budgetMs: 3000 }, (tx) =>
      settleTurnInputs(tx, {
        sessionId,
        contextRevision: 0,
        cutoffPosition: 1,
        settledBy: 'cap',
        outcome: 'delivered',
      }),
    );
    await withdrawAfterCommit(pool, KEYS, ids);
  };

  const sample = async (passMs: number, claimed: number, deferred: number) => {
    const { rows } = await pool.query<Omit<Sample, 't' | 'passMs' | 'retryClaimed' | 'retryDeferred'>>(
      `select count(*) filter (where cleaned_at is null and abandoned_at is null)::int as "pending",
              count(*) filter (where cleaned_at is null and abandoned_at is null and next_attempt_at <= app_now())::int as "dueBacklog",
              count(*) filter (where cleaned_at is null and abandoned_at is null and created_at <= app_now() - interval '7 days')::int as "overdue",
              count(*) filter (where abandoned_at is not null)::int as "abandoned"
       from channel_typing_reaction`,
    );
    samples.push({
      t: Math.round((Date.now() - started) / 1000),
      ...rows[0]!,
      passMs,
      retryClaimed: claimed,
      retryDeferred: deferred,
    });
    console.error(JSON.stringify(samples.at(-1)));
  };

  const started = Date.now();
  let nextPass = started + passIntervalS * 1000;
  let seq = 0;
  while (Date.now() - started < durationS * 1000) {
    const tick = Date.now();
    // Failures: the next eps*rate calls of Add/Delete answer 5xx (retried by the passes).
    const failures = Math.round(eps * failureRate);
    if (failures) {
      lark.faults.add({ route: 'reactions.create', kind: '5xx', times: failures });
      lark.faults.add({ route: 'reactions.delete', kind: '5xx', times: failures });
    }
    for (let i = 0; i < eps; i++) track(oneEvent(seq++).catch(() => skipped++));
    events += eps;
    if (Date.now() >= nextPass) {
      nextPass += passIntervalS * 1000;
      const r = await runMaintenancePasses(pool, { keys: KEYS });
      const retry = r.retry && 'claimed' in r.retry ? r.retry : { claimed: 0, deferred: 0 };
      await sample(r.durationMs, retry.claimed, retry.deferred);
    }
    await new Promise((res) => setTimeout(res, Math.max(0, 1000 - (Date.now() - tick))));
  }
  await Promise.allSettled([...inflight]);

  // Verdict: over the second half of the run, the due backlog, overdue and abandonment
  // counts must not grow (a small slack for in-flight turns).
  const half = samples.slice(Math.floor(samples.length / 2));
  const first = half[0];
  const last = half.at(-1);
  const slack = Math.max(5, eps);
  const flat =
    first !== undefined &&
    last !== undefined &&
    last.dueBacklog <= first.dueBacklog + slack &&
    last.overdue <= first.overdue &&
    last.abandoned <= first.abandoned;
  const verdict = {
    verdict: flat
      ? 'FLAT: capacity sufficient for this workload'
      : 'GROWING: backlog not drained, do not roll out',
    workload: { eps, workspaces, latencyMs, failureRate, durationS, passIntervalS, turnMs },
    events,
    skipped,
    maxPassMs: Math.max(0, ...samples.map((s) => s.passMs)),
    samples,
  };
  console.log(JSON.stringify(verdict, null, 2));
  process.exitCode = flat ? 0 : 1;
} finally {
  await lark.close();
  await stack.stop();
}
process.exit();
