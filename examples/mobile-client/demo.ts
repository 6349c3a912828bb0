// Drives the mobile client library against `npm run dev` (run that first, in another terminal):
//   npx tsx examples/mobile-client/demo.ts [locale]   (en by default; vi ships too)
// It finds the service through .local/dev-stack.json and mints demo-alice's token from
// .local/dev-secrets.json. Env: ACTOR_ID (demo-alice), MESSAGE_ID (demo-message-1).
// The journal lives in .local/mobile-demo-journal.json, so an interrupted run resumes next time.
// VERBOSE=1 prints every journal write and request.
import { relative } from 'node:path';
import { ReactionClient, recoveryFor } from '../../clients/mobile/src';
import { devSecrets, findDevStack, LOCAL_DIR } from '../../scripts/lib/dev-stack';
import { signActorToken } from '../../workers/auth/sign';
import { FileStore } from './file-store';
import { entryLine, journalLine } from './lines';

function serviceUrl(): string {
  try {
    return findDevStack().serviceUrl;
  } catch (err) {
    console.error(`[mobile demo] ${(err as Error).message}`);
    process.exit(1);
  }
}
const baseUrl = serviceUrl();
const actorId = process.env.ACTOR_ID ?? 'demo-alice';
const messageId = process.env.MESSAGE_ID ?? 'demo-message-1';
const locale = process.argv[2] ?? 'en';

const token = () => signActorToken(devSecrets().ACTOR_JWT_SECRET, actorId, { ttlSeconds: 3600 });

/** The device's network: can go offline, and loses the answer of the next write once armed. */
let offline = false;
let loseNextWriteAnswer = false;
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

async function settle(client: ReactionClient, label: string): Promise<void> {
  for (let i = 0; i < 60; i++) {
    const open = (await client.entries()).filter((e) => !e.terminal);
    if (!open.length) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  console.log(`\n${label}`);
  for (const e of await client.entries()) {
    console.log(`  ${entryLine(e)}`);
    const recovery = recoveryFor(e, locale);
    if (recovery) console.log(`    [${recovery.title}] ${recovery.body} → ${recovery.actionLabel}`);
    // The user has seen it: terminal entries leave the journal once acknowledged.
    if (e.terminal) await client.dismiss(e.operationId);
  }
}

const journalPath = `${LOCAL_DIR}mobile-demo-journal.json`;
const client = new ReactionClient({
  baseUrl,
  storage: new FileStore(journalPath),
  fetch: deviceFetch,
  backoff: { baseMs: 500, maxMs: 4000 },
  requestTimeoutMs: 5000,
});
client.subscribe((e) => {
  if (process.env.VERBOSE) console.log(`  journal: ${entryLine(e)}`);
});
await client.signIn({ actorId, token: await token() });
// Entries an earlier run left (killed mid-way): replayed to their end, like an app restart.
const left = (await client.entries()).length;
console.log(journalLine(left, relative(process.cwd(), journalPath)));
if (left) await settle(client, 'its entries, replayed to their end:');

console.log(`\n1. ${actorId} reacts 👍 on ${messageId}; the answer is lost, the replay applies it once`);
// Armed here, not at the start: a resumed entry's write must not take step 1's lost answer.
loseNextWriteAnswer = true;
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
await client.signOut();
offline = false;
await client.signIn({ actorId, token: await token() });
await settle(client, 'after sign-in:');

await client.signOut();
