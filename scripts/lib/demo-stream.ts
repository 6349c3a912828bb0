// npm run demo's second part (docs/channel.md "Demo"): the demo installation switched to
// `card_stream`, one message, and the reply watched on the Lark emulator as a CardKit card:
// created, sent as the reply, its text growing as the agent types, finished; the installation is
// switched back to `text` afterwards. The agent is the stack's own: `npm run dev` runs the echo
// agent with ECHO_AGENT_WORD_MS, so it types its answer out one word at a time.
import type { CardView } from '../../emulator/cards';
import type { CallLogEntry } from '../../emulator/control';
import type { LarkDemo } from './demo-setup';

export interface StreamDemoOptions {
  serviceUrl: string;
  adminToken: string;
  demo: LarkDemo;
  /** The demo's start (Date.now()): every line is `+ms` from it. */
  started: number;
  text?: string;
  waitMs?: number;
}

const POLL_MS = 100;

interface Seen {
  /** Emulator time (ms) when it happened on the emulator. */
  at: number;
  /** Orders lines of one millisecond in their causal order. */
  rank: number;
  line: string;
}

/**
 * Runs the streamed reply and prints what happened, in the order it happened. Card lines carry
 * the emulator's own times (when the card was created, sent, updated, finished: `GET
 * /__emulator/cards`), badge lines the times of the Add and delete calls (`GET
 * /__emulator/calls`), so a line printed after another happened after it even when one poll
 * sees both. A poll prints only what happened before the emulator time it read first, so a
 * later poll never finds something earlier than a line already printed. Returns the exit code.
 */
export async function streamedReplyDemo(opts: StreamDemoOptions): Promise<number> {
  const { demo, started } = opts;
  const emu = async <T>(path: string, init?: RequestInit): Promise<T> => {
    const res = await fetch(`${demo.emulatorUrl}/__emulator/${path}`, init);
    if (!res.ok) throw new Error(`emulator ${path}: HTTP ${res.status}`);
    return res.json() as Promise<T>;
  };
  const say = (ms: number, line: string) =>
    console.log(`[demo] +${String(Math.round(ms)).padStart(5)} ms ${line}`);
  const setReplyMode = async (mode: 'text' | 'card_stream') => {
    const res = await fetch(`${opts.serviceUrl}/admin/lark/installations/${demo.installationId}/settings`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${opts.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ operator: 'demo', settings: { reply_mode: mode } }),
    });
    if (res.status !== 200) throw new Error(`switching reply_mode to ${mode}: HTTP ${res.status}`);
  };
  // The emulator's clock may be moved (POST /__emulator/clock); its times are read back through it.
  const { offsetMs } = await emu<{ offsetMs: number }>('clock');
  const emuNow = async () => (await emu<{ now: number }>('clock')).now;
  const sinceStart = (emulatorAt: number) => emulatorAt - offsetMs - started;

  await setReplyMode('card_stream');
  say(Date.now() - started, 'streamed reply: installation set to reply_mode card_stream (operator "demo")');
  try {
    const text = opts.text ?? 'now a streamed reply, typed out word by word on one card';
    const sent = await emu<{
      status: number;
      message_id: string;
      payload: { event: { message: { create_time: string } } };
    }>('events', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        app_id: demo.appId,
        deliver: 'post',
        url: demo.webhookUrl,
        message: { text, chat_id: demo.chatId, chat_type: 'group' },
      }),
    });
    // At the message's time in the emulator: its badge may be on before this answer is back.
    say(
      sinceStart(Number(sent.payload.event.message.create_time)),
      `user says ${JSON.stringify(text)} (${sent.message_id})`,
    );
    if (sent.status !== 200) {
      console.error(`[demo] webhook answered HTTP ${sent.status}`);
      return 1;
    }
    return await watchCard({
      anchor: sent.message_id,
      emu,
      emuNow,
      sinceStart,
      say,
      appId: demo.appId,
      opts,
    });
  } finally {
    await setReplyMode('text');
    say(Date.now() - started, 'installation back to reply_mode text');
  }
}

async function watchCard(p: {
  anchor: string;
  appId: string;
  emu: <T>(path: string) => Promise<T>;
  emuNow: () => Promise<number>;
  sinceStart: (emulatorAt: number) => number;
  say: (ms: number, line: string) => void;
  opts: StreamDemoOptions;
}): Promise<number> {
  const waitMs = p.opts.waitMs ?? 30_000;
  const printed = new Set<string>();
  const pending: Seen[] = [];
  const note = (key: string, seen: Seen) => {
    if (printed.has(key)) return;
    printed.add(key);
    pending.push(seen);
  };
  let lastSequence = 0;
  let badge: 'never' | 'on' | 'gone' = 'never';
  let card: CardView | undefined;
  const deadline = Date.now() + waitMs;
  for (;;) {
    // Everything that happened up to `mark` is in both answers below (read after it).
    const mark = await p.emuNow();
    const { items } = await p.emu<{ items: CardView[] }>(`cards?message_id=${p.anchor}`);
    const { calls } = await p.emu<{ calls: CallLogEntry[] }>(`calls?message_id=${p.anchor}`);
    card = items.find((c) => c.sent?.reply_to === p.anchor) ?? items[0];
    for (const c of calls) {
      if (c.appId !== p.appId || c.status !== 200) continue;
      if (c.route === 'reactions.create')
        note(`badge-on-${c.at}`, { at: c.at, rank: 0, line: 'Typing badge ON' });
      if (c.route === 'reactions.delete')
        note(`badge-gone-${c.at}`, { at: c.at, rank: 9, line: 'Typing badge GONE' });
    }
    if (card) {
      const shown = JSON.stringify(card.elements.reply?.text ?? '');
      // An unsent card is not listed for the message: its creation is told with its send, so
      // no line comes out of order.
      if (card.sent)
        note('sent', {
          at: card.sent.at,
          rank: 2,
          // Its text now is its first text only while nothing has updated it.
          line: `card ${card.card_id} (created ${card.sent.at - card.created_at} ms before) sent as the reply (${card.sent.message_id})${card.last_sequence === 0 ? `, showing ${shown}` : ''}`,
        });
      const ops = card.sequences.filter((op) => op.sequence > lastSequence);
      const last = ops.at(-1);
      if (last && last.route === 'cardkit.content') {
        const missed = ops.length > 1 ? ` (+${ops.length - 1} update(s) between polls)` : '';
        note(`op-${last.sequence}`, {
          at: last.at,
          rank: 3,
          line: `card text grows (sequence ${last.sequence}${missed}): ${shown}`,
        });
      }
      if (card.finished && card.finished_at !== null)
        note('finished', {
          at: card.finished_at,
          rank: 4,
          line: `card finished, streaming off (sequence ${card.last_sequence}): ${shown}`,
        });
      lastSequence = card.last_sequence;
    }
    pending.sort((a, b) => a.at - b.at || a.rank - b.rank);
    while (pending[0] && pending[0].at <= mark) {
      const seen = pending.shift()!;
      if (seen.rank === 0) badge = 'on';
      if (seen.rank === 9) badge = 'gone';
      p.say(p.sinceStart(seen.at), seen.line);
    }
    if (card?.finished && badge !== 'on' && pending.length === 0 && printed.has('finished')) break;
    if (Date.now() > deadline) {
      console.error(
        `[demo] streamed reply not finished within ${waitMs / 1000} s: card ${card ? (card.finished ? 'finished' : 'streaming') : 'none'}, badge ${badge}`,
      );
      return 1;
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
  // What Lark was asked for this one reply, from the emulator's call log.
  const { calls } = await p.emu<{ calls: CallLogEntry[] }>(`calls?card_id=${card.card_id}`);
  const byRoute = new Map<string, number>();
  for (const c of calls) byRoute.set(c.route, (byRoute.get(c.route) ?? 0) + 1);
  const { items: replies } = await p.emu<{ items: unknown[] }>(`messages/${p.anchor}/replies`);
  p.say(
    Date.now() - p.opts.started,
    `${replies.length} reply on the message, ${calls.length} Lark calls for it: ${[...byRoute].map(([r, n]) => `${r} ${n}`).join(', ')}`,
  );
  if (card.sequences.filter((op) => op.route === 'cardkit.content').length === 0)
    p.say(
      Date.now() - p.opts.started,
      '(the agent answered in one piece: start npm run dev again to get the echo agent that types, ECHO_AGENT_WORD_MS)',
    );
  return replies.length === 1 ? 0 : 1;
}
