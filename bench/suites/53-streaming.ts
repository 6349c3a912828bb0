import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CardRecord } from '../../emulator/cards';
import type { CallLogEntry } from '../../emulator/control';
import { startLarkEmulator } from '../../emulator/server';
import { freePort } from '../../scripts/lib/postgres';
import type { BenchStack } from '../lib/stack';
import { type BenchRow, percentile, round } from '../lib/stats';
import { startStreamingAgent } from '../lib/streaming-agent';
import { postEvent, setupApp, startWorker } from './50-channel';

/**
 * Streaming card replies (issue 34 item 5) through `wrangler dev`, beside the text reply in the
 * same run with the same agent. The agent (bench/lib/streaming-agent.ts, in this process) verifies
 * each signed request and streams BENCH_STREAM_DELTAS words BENCH_STREAM_DELTA_MS apart; it
 * records when it wrote its first delta and its `done`. The Lark emulator (this process too, so
 * one clock) records when the card was sent and each update it accepted, with Lark's own limits
 * on (50/s per app, 10/s per card): a pace above them would show as refusals.
 *
 *  - first chunk → visible: a card is visible when the reply carrying it is sent, with its first
 *    text in it (CardStream creates the card with the text it has, card-stream.ts), so the
 *    emulator's send time minus the agent's first-delta time; a text reply is visible when it is
 *    posted, which can only follow the agent's `done`.
 *  - done → final: the card's finish (streaming off, final text), or the text reply's post,
 *    minus the agent's `done`.
 *  - updates per card per second: the most update operations a card took in any 1000 ms (the
 *    window Lark's 10/s counts), max and p99 over the cards.
 *  - Lark calls per reply: the emulator's call log, every call about the reply (the create, the
 *    send, each update and the finish; a text reply's post), the badge's Add and delete apart.
 *
 * Each wave posts `concurrency` events at once, each in its own chat, and waits for all of
 * their replies; waves per level: BENCH_STREAM_WAVES (default 8 at 1 concurrent, 2 at 16).
 */
const LEVELS = (process.env.BENCH_STREAM_LEVELS ?? '1,16').split(',').map(Number);
const DELTAS = Number(process.env.BENCH_STREAM_DELTAS ?? 24);
const DELTA_MS = Number(process.env.BENCH_STREAM_DELTA_MS ?? 40);
const THINK_MS = 100;
const WAVE_TIMEOUT_MS = 90_000;
const MODES = ['text', 'card_stream'] as const;
type Mode = (typeof MODES)[number];

const loadAverage = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** The most entries of `times` inside any window of `windowMs` (sliding, as a rate limit counts). */
export function peakInWindow(times: number[], windowMs = 1000): number {
  const sorted = [...times].sort((a, b) => a - b);
  let peak = 0;
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while (sorted[i]! - sorted[j]! >= windowMs) j++;
    peak = Math.max(peak, i - j + 1);
  }
  return peak;
}

interface Sample {
  firstVisibleMs: number;
  finalMs: number;
  /** Card only: peak update operations in a 1000 ms window. */
  peakUpdatesPerSecond?: number;
  /** Card only: refusals the emulator recorded on the card (rate, sequence). */
  refused?: number;
  calls: CallLogEntry[];
}

export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const lark = await startLarkEmulator({ rateLimits: true });
  const secret = randomBytes(24).toString('hex');
  const agent = await startStreamingAgent({ secret, deltas: DELTAS, deltaMs: DELTA_MS, thinkMs: THINK_MS });
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const adminToken = `bench-admin-${randomBytes(12).toString('hex')}`;
  const worker = await startWorker(
    {
      DATABASE_URL: stack.databaseUrl,
      NEON_WS_PROXY: stack.wsProxy,
      ADMIN_TOKEN: adminToken,
      SECRET_KEYS: JSON.stringify({ '1': randomBytes(32).toString('base64') }),
      LARK_API_BASE: lark.url,
      AGENT_URL: agent.url,
      AGENT_SIGNING_SECRET: secret,
      LOG_LEVEL: 'error',
    },
    port,
  );
  const rows: BenchRow[] = [];
  try {
    const { installationId, appId } = await setupApp(base, adminToken, lark.url);
    const setMode = async (mode: Mode) => {
      const res = await fetch(`${base}/admin/lark/installations/${installationId}/settings`, {
        method: 'PATCH',
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ operator: 'bench', settings: { reply_mode: mode } }),
      });
      if (res.status !== 200) throw new Error(`reply_mode ${mode}: ${res.status} ${await res.text()}`);
    };
    let chatNo = 0;
    /** One wave: `n` events at once, each its own chat; each reply's figures once all are finished. */
    const wave = async (mode: Mode, n: number): Promise<Sample[]> => {
      const posted = await Promise.all(
        Array.from({ length: n }, async () => {
          const chat = `oc_stream-${chatNo++}-${randomBytes(3).toString('hex')}`;
          const res = await fetch(`${lark.url}/__emulator/events`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              app_id: appId,
              deliver: 'return',
              message: { text: 'hi', chat_id: chat },
            }),
          });
          const built = (await res.json()) as {
            message_id: string;
            request: { headers: Record<string, string>; body: string };
          };
          return built;
        }),
      );
      const statuses = await Promise.all(posted.map((d) => postEvent(base, installationId, d.request)));
      if (statuses.some((s) => s !== 200)) throw new Error(`events answered ${statuses.join(',')}`);
      const anchors = posted.map((d) => d.message_id);
      const started = Date.now();
      const cardOf = (anchor: string): CardRecord | undefined =>
        [...lark.state.cards.cards.values()].find((c) => c.sent?.reply_to === anchor);
      const done = (anchor: string) =>
        mode === 'text'
          ? lark.state.repliesTo(anchor).length > 0 && agent.turns.has(anchor)
          : cardOf(anchor)?.finished_at !== undefined && agent.turns.has(anchor);
      while (!anchors.every(done)) {
        if (Date.now() - started > WAVE_TIMEOUT_MS)
          throw new Error(`${mode}: ${anchors.filter((a) => !done(a)).length} of ${n} replies unfinished`);
        await new Promise((r) => setTimeout(r, 20));
      }
      return anchors.map((anchor) => {
        const turn = agent.turns.get(anchor)!;
        const replies = lark.state.repliesTo(anchor);
        // At most one reply per turn, in either mode: the run is void otherwise.
        if (replies.length !== 1) throw new Error(`${mode}: ${replies.length} replies to one turn`);
        if (mode === 'text') {
          const visible = Number(replies[0]!.create_time);
          return {
            firstVisibleMs: visible - turn.firstChunkAt,
            finalMs: visible - turn.doneAt,
            calls: lark.calls.filter((c) => c.route === 'reply' && c.messageId === anchor),
          };
        }
        const card = cardOf(anchor)!;
        return {
          firstVisibleMs: card.sent!.at - turn.firstChunkAt,
          finalMs: card.finished_at! - turn.doneAt,
          peakUpdatesPerSecond: peakInWindow(card.sequences.map((op) => op.at)),
          refused: card.refused.length,
          calls: lark.calls.filter(
            (c) => c.cardId === card.card_id || (c.route === 'reply' && c.messageId === anchor),
          ),
        };
      });
    };
    // Warm-up (not measured): the first turns compile and open what every later one reuses.
    for (const mode of MODES) {
      await setMode(mode);
      await wave(mode, 1);
    }
    for (const concurrency of LEVELS) {
      const waves = Number(process.env.BENCH_STREAM_WAVES ?? (concurrency === 1 ? 8 : 2));
      for (const mode of MODES) {
        await setMode(mode);
        const samples: Sample[] = [];
        const replacementsBefore = agent.replacements;
        for (let w = 0; w < waves; w++) samples.push(...(await wave(mode, concurrency)));
        rows.push(figures(mode, concurrency, samples, agent.replacements - replacementsBefore));
      }
    }
    if (agent.refused > 0) throw new Error(`${agent.refused} agent requests failed the signature check`);
  } finally {
    worker.stop();
    await agent.close();
    await lark.close();
  }
  return rows;
}

function figures(mode: Mode, concurrency: number, samples: Sample[], replacements: number): BenchRow {
  const first = samples.map((s) => s.firstVisibleMs);
  const final = samples.map((s) => s.finalMs);
  const byRoute = new Map<string, number>();
  for (const s of samples) for (const c of s.calls) byRoute.set(c.route, (byRoute.get(c.route) ?? 0) + 1);
  const calls = samples.reduce((n, s) => n + s.calls.length, 0);
  const target = concurrency === 1 ? '≤ 300 ms' : concurrency === 16 ? '≤ 1 s' : '';
  const row: BenchRow = {
    suite: 'streaming',
    case: `${mode} reply, ${concurrency} concurrent (agent: ${DELTAS} deltas ${DELTA_MS} ms apart)`,
    n: samples.length,
    'first chunk → visible p50 ms': round(percentile(first, 50)),
    'p99 ms': round(percentile(first, 99)),
    ...(mode === 'card_stream' && target ? { target } : {}),
    'done → final p50 ms': round(percentile(final, 50)),
    'done → final p99 ms': round(percentile(final, 99)),
    'Lark calls/reply': round(calls / samples.length),
    'calls by route': [...byRoute].map(([r, n]) => `${r} ${round(n / samples.length)}`).join(', '),
    replacements,
    load: loadAverage(),
  };
  if (mode === 'card_stream') {
    const peaks = samples.map((s) => s.peakUpdatesPerSecond!);
    row['updates/card/s max'] = Math.max(...peaks);
    row['updates/card/s p99'] = percentile(peaks, 99);
    row['refused on cards'] = samples.reduce((n, s) => n + s.refused!, 0);
  }
  return row;
}
