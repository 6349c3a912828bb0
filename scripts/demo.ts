// npm run demo [-- "message" ["message" ...]]: against a running `npm run dev`, the Lark
// emulator sends signed, encrypted im.message.receive_v1 events to the webhook (three by
// default, back to back, so they coalesce into one turn), and the demo prints, in the order
// they happened on the emulator's clock (scripts/lib/demo-timeline.ts): each message and the
// webhook's answer, the `Typing` badge added to each message, the bot's reply, and each badge
// withdrawn. It polls the emulator's inspection API (its call log and the replies), finds the
// stack (service, emulator) through .local/dev-stack.json and the admin token in
// .local/dev-secrets.json. Then the same as a streamed card reply (scripts/lib/demo-stream.ts).
import { setupLarkDemo } from './lib/demo-setup';
import { streamedReplyDemo } from './lib/demo-stream';
import { demoTimeline, doneLine, type EmulatorCall, type SentMessage, sinceStart } from './lib/demo-timeline';
import { type DevStack, devSecrets, findDevStack } from './lib/dev-stack';

const stamp = new Date().toISOString().slice(11, 19);
const texts =
  process.argv.length > 2
    ? process.argv.slice(2)
    : [`hello (${stamp})`, 'are you there?', 'three quick messages, one turn'];
const WAIT_MS = 30_000;
const POLL_MS = 100;

function runningStack(): DevStack & { emulatorUrl: string } {
  try {
    const stack = findDevStack();
    if (!stack.emulatorUrl)
      throw new Error('npm run dev runs without the Lark emulator (LARK_API_BASE is set)');
    return stack as DevStack & { emulatorUrl: string };
  } catch (err) {
    console.error(`[demo] ${(err as Error).message}`);
    process.exit(1);
  }
}
const { serviceUrl, emulatorUrl } = runningStack();

const emu = <T>(path: string, init?: RequestInit): Promise<T> =>
  fetch(`${emulatorUrl}/__emulator/${path}`, init).then((r) => r.json() as Promise<T>);

const up = await fetch(`${serviceUrl}/healthz`).then(
  (r) => r.ok,
  // Unreachable counts as down; the line below says so.
  () => false,
);
if (!up) {
  console.error(`[demo] npm run dev is running but ${serviceUrl}/healthz does not answer ok`);
  process.exit(1);
}
const demo = await setupLarkDemo({ serviceUrl, adminToken: devSecrets().ADMIN_TOKEN, emulatorUrl });
console.log(`[demo] installation ${demo.installationId} (app ${demo.appId}), chat ${demo.chatId}`);

// Every line is stamped on the emulator's clock, from its own reading at the start.
const { now: started } = await emu<{ now: number }>('clock');
const messages: SentMessage[] = [];
const printed = new Set<string>();

/** This app's replies' texts on the demo's messages, oldest first. */
async function replyTexts(calls: EmulatorCall[]): Promise<Map<string, string[]>> {
  const texts = new Map<string, string[]>();
  const anchors = new Set(
    calls.filter((c) => c.route === 'reply' && c.appId === demo.appId).map((c) => c.messageId),
  );
  for (const m of messages) {
    if (!anchors.has(m.id)) continue;
    const { items } = await emu<{ items: { content: string }[] }>(`messages/${m.id}/replies`);
    texts.set(
      m.id,
      items.map((r) => (JSON.parse(r.content) as { text?: string }).text ?? r.content),
    );
  }
  return texts;
}

/**
 * Prints what happened since the last call, oldest first. Everything the emulator did before
 * its call log was read is in it, and what it does later is stamped later, so each render only
 * adds lines after the ones already printed.
 */
async function render() {
  const { calls } = await emu<{ calls: EmulatorCall[] }>('calls');
  const timeline = demoTimeline(demo.appId, messages, calls, await replyTexts(calls));
  for (const e of timeline.events) {
    if (printed.has(e.key)) continue;
    printed.add(e.key);
    console.log(`[demo] ${sinceStart(e.at, started)} ${e.line}`);
  }
  return timeline;
}

interface Sent {
  status: number;
  latencyMs: number;
  message_id: string;
  payload: { event: { message: { create_time: string } } };
}
for (const text of texts) {
  const sent = await emu<Sent>('events', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      app_id: demo.appId,
      deliver: 'post',
      url: demo.webhookUrl,
      message: { text, chat_id: demo.chatId, chat_type: 'group' },
    }),
  });
  messages.push({
    id: sent.message_id,
    text,
    sentAt: Number(sent.payload.event.message.create_time),
    status: sent.status,
    latencyMs: sent.latencyMs,
  });
  await render();
  if (sent.status !== 200) process.exit(1);
}

for (;;) {
  const timeline = await render();
  const done = doneLine(timeline);
  if (done) {
    console.log(`[demo] ${done}`);
    process.exit(await streamedReply());
  }
  const elapsed = (await emu<{ now: number }>('clock')).now - started;
  if (elapsed > WAIT_MS) {
    console.error(
      `[demo] not finished within ${WAIT_MS / 1000} s: replies ${timeline.replies}, badges ${[...timeline.badges.values()].join(', ')}`,
    );
    process.exit(1);
  }
  await new Promise((r) => setTimeout(r, POLL_MS));
}

/** The second part: the same installation answering with a streamed card (scripts/lib/demo-stream.ts). */
function streamedReply(): Promise<number> {
  return streamedReplyDemo({ serviceUrl, adminToken: devSecrets().ADMIN_TOKEN, demo, started }).catch(
    (err: Error) => {
      console.error(`[demo] streamed reply: ${err.message}`);
      return 1;
    },
  );
}
