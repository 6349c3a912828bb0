// npm run demo [-- "your message"]: against a running `npm run dev`, the Lark emulator sends a
// signed, encrypted im.message.receive_v1 to the webhook, and the bot's reply is printed as
// soon as it appears in the emulator. Env: SERVICE_URL (http://127.0.0.1:8787),
// LARK_EMULATOR_URL (http://127.0.0.1:8790), ADMIN_TOKEN (else .local/dev-secrets.json).
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setupLarkDemo } from './lib/demo-setup';

const serviceUrl = process.env.SERVICE_URL ?? `http://127.0.0.1:${process.env.PORT ?? 8787}`;
const emulatorUrl = process.env.LARK_EMULATOR_URL ?? 'http://127.0.0.1:8790';
const text = process.argv[2] ?? `hello from the demo at ${new Date().toISOString()}`;
const REPLY_WAIT_MS = 30_000;

function adminToken(): string {
  if (process.env.ADMIN_TOKEN) return process.env.ADMIN_TOKEN;
  const path = fileURLToPath(new URL('../.local/dev-secrets.json', import.meta.url));
  if (!existsSync(path))
    throw new Error('no ADMIN_TOKEN and no .local/dev-secrets.json: is `npm run dev` running?');
  return (JSON.parse(readFileSync(path, 'utf8')) as { ADMIN_TOKEN: string }).ADMIN_TOKEN;
}

const up = await fetch(`${serviceUrl}/healthz`).then(
  (r) => r.ok,
  () => false,
);
if (!up) {
  console.error(`[demo] no service at ${serviceUrl}: start it with \`npm run dev\``);
  process.exit(1);
}
const demo = await setupLarkDemo({ serviceUrl, adminToken: adminToken(), emulatorUrl });
console.log(`[demo] installation ${demo.installationId} (app ${demo.appId}), chat ${demo.chatId}`);

const started = Date.now();
const sent = (await fetch(`${emulatorUrl}/__emulator/events`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({
    app_id: demo.appId,
    deliver: 'post',
    url: demo.webhookUrl,
    message: { text, chat_id: demo.chatId, chat_type: 'group' },
  }),
}).then((r) => r.json())) as { status: number; response: string; latencyMs: number; message_id: string };
console.log(`[demo] user says: ${JSON.stringify(text)} (message ${sent.message_id})`);
console.log(`[demo] webhook answered HTTP ${sent.status} in ${sent.latencyMs} ms: ${sent.response}`);
if (sent.status !== 200) process.exit(1);

for (;;) {
  const { items } = (await fetch(`${emulatorUrl}/__emulator/messages/${sent.message_id}/replies`).then((r) =>
    r.json(),
  )) as { items: { message_id: string; content: string }[] };
  if (items.length > 0) {
    for (const reply of items) {
      const body = JSON.parse(reply.content) as { text?: string };
      console.log(
        `[demo] bot replies after ${Date.now() - started} ms: ${JSON.stringify(body.text ?? reply.content)}`,
      );
    }
    process.exit(0);
  }
  if (Date.now() - started > REPLY_WAIT_MS) {
    console.error(`[demo] no reply within ${REPLY_WAIT_MS / 1000} s (debounce is CHANNEL_DEBOUNCE_MS)`);
    process.exit(1);
  }
  await new Promise((r) => setTimeout(r, 200));
}
