import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { MAX_INPUT_TEXT } from '../../workers/channel/session';
import { testPool } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { changedTables, tableSums } from '../helpers/tables';
import { buildEvent, installApp, submit, type TestApp } from '../lark/helpers';

/**
 * Issue 16 item 2: a correctly signed event whose content Postgres cannot store is Lark's
 * (or its user's) doing, and redelivering it cannot help: it is acknowledged (200), its
 * receipt records it as rejected (so a redelivery is a duplicate), nothing else is written,
 * and one line `lark_event_unstorable` says so.
 */
const pool = testPool(2);
afterAll(() => pool.end());
let logs = captureLogLines();
afterEach(() => {
  logs.restore();
  logs = captureLogLines();
});

// biome-ignore lint/suspicious/noExplicitAny: a Lark payload, edited field by field
type Payload = any;

/** A signed delivery of the emulator's message event, edited by `edit` before signing. */
async function signedEdited(app: TestApp, edit: (p: Payload) => void, text = 'hello') {
  const base = (await buildEvent(app, { message: { text } })) as unknown as { payload: Payload };
  const payload = structuredClone(base.payload);
  edit(payload);
  const built = await buildEvent(app, { type: 'custom', payload });
  return { request: built.request, eventId: payload.header.event_id as string, payload };
}

async function receipts(installationId: string) {
  const { rows } = await pool.query<{ event_id: string; status: string }>(
    'select event_id, status from lark_event_receipts where installation_id = $1 order by received_at',
    [installationId],
  );
  return rows;
}

const CASES: [string, (p: Payload) => void][] = [
  ['U+0000 in the message text', (p) => (p.event.message.content = JSON.stringify({ text: 'a\u0000b' }))],
  [
    'a lone surrogate in the message text',
    (p) => (p.event.message.content = JSON.stringify({ text: 'a\ud800b' })),
  ],
  ['U+0000 in the raw content', (p) => (p.event.message.content = '{"text":"x"}\u0000')],
  ['U+0000 in the chat id', (p) => (p.event.message.chat_id = 'oc_a\u0000b')],
  ['a lone surrogate in the sender id', (p) => (p.event.sender.sender_id.open_id = 'ou_\udc00')],
  ['U+0000 in the message type', (p) => (p.event.message.message_type = 'te\u0000xt')],
];

describe('a signed event Postgres cannot store is acknowledged and recorded as rejected', () => {
  for (const [what, edit] of CASES)
    it(`${what} → 200, a rejected receipt and nothing else; the redelivery is a duplicate`, async () => {
      const app = await installApp();
      const { request, eventId } = await signedEdited(app, edit);
      const before = await tableSums(pool);
      const res = await submit(app.installationId, request);
      expect({ status: res.status, body: await res.json() }).toEqual({
        status: 200,
        body: { ok: true, rejected: 'unstorable' },
      });
      expect(changedTables(before, await tableSums(pool))).toEqual(['public.lark_event_receipts']);
      expect(await receipts(app.installationId)).toEqual([{ event_id: eventId, status: 'rejected' }]);
      // Lark's redelivery (the same bytes) is acknowledged as a duplicate, logged nowhere again.
      const again = await submit(app.installationId, request);
      expect({ status: again.status, body: await again.json() }).toEqual({
        status: 200,
        body: { ok: true, duplicate: true },
      });
      expect(await receipts(app.installationId)).toHaveLength(1);
      expect(logs.events('lark_event_unstorable')).toEqual([
        expect.objectContaining({ level: 'warn', installationId: app.installationId, eventId }),
      ]);
      expect(logs.events('unhandled_error')).toEqual([]);
    });

  it('an event id that cannot be stored is recorded under its JSON-escaped form', async () => {
    const app = await installApp();
    const { request } = await signedEdited(app, (p) => (p.header.event_id = 'ev\u0000\ud800'));
    const res = await submit(app.installationId, request);
    expect(res.status).toBe(200);
    expect(await receipts(app.installationId)).toEqual([
      { event_id: JSON.stringify('ev\u0000\ud800'), status: 'rejected' },
    ]);
    expect((await submit(app.installationId, request)).status).toBe(200);
    expect(await receipts(app.installationId)).toHaveLength(1);
  });

  it('a rejected event id stays rejected: a later storable delivery under it is a duplicate', async () => {
    const app = await installApp();
    const bad = await signedEdited(app, CASES[0]![1]);
    expect((await submit(app.installationId, bad.request)).status).toBe(200);
    const good = await signedEdited(app, (p) => (p.header.event_id = bad.eventId));
    expect(await (await submit(app.installationId, good.request)).json()).toEqual({
      ok: true,
      duplicate: true,
    });
    expect(await receipts(app.installationId)).toEqual([{ event_id: bad.eventId, status: 'rejected' }]);
  });
});

describe('an empty message_id (issue 28 hole 9)', () => {
  it('webhook.empty_message_id_refused: a signed event whose message_id is empty is refused before any write: no receipt, no input, no ledger row, no Add', async () => {
    const app = await installApp();
    const { request } = await signedEdited(app, (p) => (p.event.message.message_id = ''));
    const before = await tableSums(pool);
    const res = await submit(app.installationId, request);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error?: { code?: string } }).error?.code).toBe('lark_bad_event');
    expect(changedTables(before, await tableSums(pool))).toEqual([]);
    expect(logs.events('unhandled_error')).toEqual([]);
  });
});

// Last in the file: its event is accepted, and the turn work it starts in the background
// (the post-answer Add, the actor's wake) would otherwise land inside a later test's
// before/after table sums.
describe('the service never makes unstorable text itself', () => {
  it('a text longer than the kept prefix, cut inside a surrogate pair, is recorded (the pair is dropped whole)', async () => {
    const app = await installApp();
    const text = `${'a'.repeat(MAX_INPUT_TEXT - 1)}👍 and more`;
    const built = await buildEvent(app, { message: { text } });
    const res = await submit(app.installationId, built.request);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true });
    expect(await receipts(app.installationId)).toEqual([{ event_id: built.event_id, status: 'accepted' }]);
  });
});
