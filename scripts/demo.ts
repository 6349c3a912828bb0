// npm run demo [-- "message" ["message" ...]]: against a running `npm run dev`, the Lark
// emulator sends signed, encrypted im.message.receive_v1 events to the webhook (three by
// default, back to back, so they coalesce into one turn), and the demo prints, by polling
// the emulator's inspection API: the `Typing` badge appearing on each message, the bot's
// reply, and every badge gone; then the same as a streamed card reply (scripts/lib/demo-stream.ts).
// It finds the stack (service, emulator) through
// .local/dev-stack.json and the admin token in .local/dev-secrets.json.
import { setupLarkDemo } from './lib/demo-setup';
import { streamedReplyDemo } from './lib/demo-stream';
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

const started = Date.now();
const at = () => `+${String(Date.now() - started).padStart(5)} ms`;
interface Sent {
  status: number;
  response: string;
  latencyMs: number;
  message_id: string;
}
const messages: { id: string; text: string; badge: 'never' | 'on' | 'gone' }[] = [];
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
  console.log(`[demo] ${at()} user says ${JSON.stringify(text)} (${sent.message_id})`);
  console.log(`[demo] ${at()}   webhook answered HTTP ${sent.status} in ${sent.latencyMs} ms`);
  if (sent.status !== 200) process.exit(1);
  messages.push({ id: sent.message_id, text, badge: 'never' });
}

/** This app's `Typing` reactions on a message (humans' and other apps' are not ours). */
async function ourTyping(messageId: string): Promise<number> {
  const { items } = await emu<{
    items: {
      reaction_type: { emoji_type: string };
      operator: { operator_id: string; operator_type: string };
    }[];
  }>(`messages/${messageId}/reactions`);
  return items.filter(
    (r) =>
      r.reaction_type.emoji_type === 'Typing' &&
      r.operator.operator_type === 'app' &&
      r.operator.operator_id === demo.appId,
  ).length;
}

const replied = new Set<string>();
for (;;) {
  for (const m of messages) {
    const on = (await ourTyping(m.id)) > 0;
    if (on && m.badge === 'never') {
      m.badge = 'on';
      console.log(`[demo] ${at()} Typing badge ON   ${JSON.stringify(m.text)}`);
    } else if (!on && m.badge === 'on') {
      m.badge = 'gone';
      console.log(`[demo] ${at()} Typing badge GONE ${JSON.stringify(m.text)}`);
    }
    const { items } = await emu<{ items: { message_id: string; content: string }[] }>(
      `messages/${m.id}/replies`,
    );
    for (const reply of items) {
      if (replied.has(reply.message_id)) continue;
      replied.add(reply.message_id);
      const body = JSON.parse(reply.content) as { text?: string };
      console.log(
        `[demo] ${at()} bot replies to ${JSON.stringify(m.text)}: ${JSON.stringify(body.text ?? reply.content)}`,
      );
    }
  }
  const badgesDone = messages.every((m) => m.badge !== 'on');
  if (replied.size > 0 && badgesDone) {
    const never = messages.filter((m) => m.badge === 'never');
    console.log(
      `[demo] ${at()} every badge gone${never.length ? ` (${never.length} never seen: too fast for the ${POLL_MS} ms poll, or skipped)` : ''}`,
    );
    process.exit(await streamedReply());
  }
  if (Date.now() - started > WAIT_MS) {
    console.error(
      `[demo] not finished within ${WAIT_MS / 1000} s: replies ${replied.size}, badges ${messages.map((m) => m.badge).join(', ')}`,
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
