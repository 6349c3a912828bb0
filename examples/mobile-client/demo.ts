// Drives the mobile client library against `npm run dev` (run that first, in another terminal):
//   npx tsx examples/mobile-client/demo.ts [locale]
// Env: BASE_URL (default http://127.0.0.1:8787), ACTOR_TOKEN (printed by npm run dev; else one
// is minted from .local/dev-secrets.json), ACTOR_ID (demo-alice), MESSAGE_ID (demo-message-1).
// The journal lives in .local/mobile-demo-journal.json, so an interrupted run resumes next time.
// VERBOSE=1 prints every journal write and request.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type JournalEntry, ReactionClient, recoveryFor, statusOf } from '../../clients/mobile/src';
import { signActorToken } from '../../workers/auth/sign';
import { FileStore } from './file-store';

const root = fileURLToPath(new URL('../..', import.meta.url));
const baseUrl = process.env.BASE_URL ?? 'http://127.0.0.1:8787';
const actorId = process.env.ACTOR_ID ?? 'demo-alice';
const messageId = process.env.MESSAGE_ID ?? 'demo-message-1';
const locale = process.argv[2] ?? 'vi';

async function token(): Promise<string> {
  if (process.env.ACTOR_TOKEN) return process.env.ACTOR_TOKEN;
  const secrets = JSON.parse(readFileSync(`${root}.local/dev-secrets.json`, 'utf8'));
  return signActorToken(secrets.ACTOR_JWT_SECRET, actorId, { ttlSeconds: 3600 });
}

/** The device's network: can go offline, and loses the answer of the next write once. */
let offline = false;
let loseNextWriteAnswer = true;
async function deviceFetch(input: string, init: RequestInit): Promise<Response> {
  if (offline) throw new TypeError('offline');
  if (process.env.VERBOSE) console.log(`  fetch ${init.method} ${input}`);
  const res = await fetch(input, init);
  if (init.method === 'PUT' && loseNextWriteAnswer) {
    loseNextWriteAnswer = false;
    await res.text();
    console.log('  (network) the write reached the server; its answer is lost');
    throw new TypeError('connection lost');
  }
  return res;
}

const show = (e: JournalEntry) =>
  `${e.intent.emoji} ${e.intent.desired.padEnd(7)} op ${e.operationId.slice(0, 8)} ${statusOf(e)}` +
  (e.lastError && !e.terminal ? ` (last: ${e.lastError})` : '') +
  (e.terminal ? ` → ${e.terminal.outcome} (reaction ${e.terminal.reflected})` : '');

async function settle(client: ReactionClient, label: string): Promise<void> {
  for (let i = 0; i < 60; i++) {
    const open = (await client.entries()).filter((e) => !e.terminal);
    if (!open.length) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  console.log(`\n${label}`);
  for (const e of await client.entries()) {
    console.log(`  ${show(e)}`);
    const recovery = recoveryFor(e, locale);
    if (recovery) console.log(`    [${recovery.title}] ${recovery.body} → ${recovery.actionLabel}`);
    // The user has seen it: terminal entries leave the journal once acknowledged.
    if (e.terminal) await client.dismiss(e.operationId);
  }
}

mkdirSync(`${root}.local`, { recursive: true });
const journalPath = `${root}.local/mobile-demo-journal.json`;
const resumed = existsSync(journalPath);
const client = new ReactionClient({
  baseUrl,
  storage: new FileStore(journalPath),
  fetch: deviceFetch,
  backoff: { baseMs: 500, maxMs: 4000 },
  requestTimeoutMs: 5000,
});
client.subscribe((e) => {
  if (process.env.VERBOSE) console.log(`  journal: ${show(e)}`);
});
await client.signIn({ actorId, token: await token() });
if (resumed) await settle(client, 'resumed the journal of an earlier run:');

console.log(`\n1. ${actorId} reacts 👍 on ${messageId}; the answer is lost, the replay applies it once`);
await client.choose({ messageId, emoji: '👍', desired: 'present' });
await settle(client, 'after replay:');

console.log('\n2. offline: remove 👍, then change your mind and add it again; back online');
offline = true;
await client.choose({ messageId, emoji: '👍', desired: 'absent' });
await client.choose({ messageId, emoji: '👍', desired: 'present' });
offline = false;
await settle(client, 'the newer choice wins; the older one was replaced:');

console.log('\n3. sign out with a queued choice, sign back in: it is reconciled, not dropped');
offline = true;
await client.choose({ messageId, emoji: '🎉', desired: 'present' });
client.signOut();
offline = false;
await client.signIn({ actorId, token: await token() });
await settle(client, 'after sign-in:');

client.signOut();
