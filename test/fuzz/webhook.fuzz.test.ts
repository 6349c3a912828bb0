import fc from 'fast-check';
import { beforeAll, describe, it } from 'vitest';
import { uid } from '../helpers/db';
import { buildEvent, installApp, type TestApp } from '../lark/helpers';
import {
  bodyBytes,
  contentType,
  type FuzzCase,
  fuzzPool,
  itFuzzes,
  nastyJson,
  nastySegment,
  nastyString,
  workerSecrets,
} from './harness';

/**
 * The Lark webhook, two ways. Unsigned: whatever anyone on the internet can send (no
 * installation's keys): every answer must be a 4xx with nothing written. Signed: deliveries
 * signed and encrypted exactly as Lark would (by the emulator) around hostile event content:
 * the answer may be 200 (recorded, ignored, rejected as unstorable, duplicate) or a 400, never
 * a 5xx, and a refusal still writes nothing.
 */
const pool = fuzzPool();

const ROUTE = 'POST /lark/events/:installationId';
let encrypted: TestApp;
let plain: TestApp;
beforeAll(async () => {
  encrypted = await installApp();
  plain = await installApp({ encrypt: false });
}, 60_000);

const appSecrets = () => [
  ...workerSecrets(),
  ...[encrypted, plain].flatMap((a) => [a.appSecret, a.verificationToken, a.encryptKey ?? '']),
];

function post(
  installationId: string,
  headers: Record<string, string>,
  body: string | Uint8Array | undefined,
): FuzzCase {
  return {
    route: ROUTE,
    request: new Request(`http://test/lark/events/${installationId}`, { method: 'POST', headers, body }),
  };
}

// ---- unsigned -------------------------------------------------------------------------

/** A Lark-shaped payload with a token that is never the installation's. */
const forgedPayload = fc.oneof(
  fc.record({
    schema: fc.constantFrom('2.0', '1.0', nastyString as fc.Arbitrary<string>),
    header: fc.record({
      event_id: nastyString,
      event_type: fc.constantFrom('im.message.receive_v1', 'im.message.recalled_v1'),
      create_time: nastyString,
      token: nastyString,
      app_id: nastyString,
    }),
    event: nastyJson,
  }),
  fc.record({ type: fc.constant('url_verification'), challenge: nastyString, token: nastyString }),
  fc.record({ type: fc.constant('event_callback'), token: nastyString, uuid: nastyString }),
  fc.record({ encrypt: fc.oneof(nastyString, fc.base64String({ maxLength: 200 })) }),
  nastyJson,
);

const larkHeaders = fc.record(
  {
    'x-lark-signature': fc.oneof(nastyString, fc.stringMatching(/^[0-9a-f]{64}$/)),
    'x-lark-request-timestamp': fc.oneof(
      fc.constant(null).map(() => String(Math.floor(Date.now() / 1000))),
      fc.constantFrom('0', '99999999999999', '-1', '1e3', ''),
      nastyString,
    ),
    'x-lark-request-nonce': nastyString,
  },
  { requiredKeys: [] },
);

const unsignedCase: fc.Arbitrary<() => FuzzCase> = fc
  .record({
    target: fc.oneof(
      { weight: 4, arbitrary: fc.constantFrom('encrypted', 'plain') },
      {
        weight: 1,
        arbitrary: fc.oneof(
          fc.constant(null).map(() => `li_${uid('x').slice(2)}`),
          nastySegment,
        ),
      },
    ),
    headers: larkHeaders,
    type: contentType,
    body: bodyBytes(forgedPayload),
  })
  .map(({ target, headers, type, body }) => () => {
    const id =
      target === 'encrypted' ? encrypted.installationId : target === 'plain' ? plain.installationId : target;
    // A header value cannot hold every string: what a client cannot send is not a case.
    const sendable = Object.fromEntries(
      Object.entries(headers).filter(([, v]) => /^[\t\x20-\x7e\x80-\xff]*$/.test(String(v))),
    ) as Record<string, string>;
    return post(id || '%20', { ...sendable, ...(type ? { 'content-type': type } : {}) }, body);
  });

// ---- signed ---------------------------------------------------------------------------

/** Values that look like Lark's, or are hostile. */
const larkish = (real: fc.Arbitrary<string>) =>
  fc.oneof({ weight: 4, arbitrary: real }, { weight: 1, arbitrary: nastyString });
const chatIds = ['oc_fuzz_a', 'oc_fuzz_b'];
/** A few event ids recur on purpose: redeliveries, and one id under different content. */
const eventId = fc.oneof(
  { weight: 6, arbitrary: fc.constant(null).map(() => `ev_${uid('e').slice(2)}`) },
  { weight: 1, arbitrary: fc.constantFrom('ev_fuzz_repeat_1', 'ev_fuzz_repeat_2') },
  { weight: 1, arbitrary: nastyString },
);

function messageEvent(app: TestApp) {
  const text = fc.oneof(nastyString, fc.string({ maxLength: 50 }), fc.constant('x'.repeat(4000) + '👍'));
  return fc.record({
    schema: fc.constant('2.0'),
    header: fc.record({
      event_id: eventId,
      event_type: fc.oneof(
        { weight: 8, arbitrary: fc.constant('im.message.receive_v1') },
        { weight: 1, arbitrary: fc.constantFrom('im.message.recalled_v1', 'im.chat.member.bot.added_v1') },
        { weight: 1, arbitrary: nastyString },
      ),
      create_time: fc.constant(null).map(() => String(Date.now())),
      token: fc.constant(app.verificationToken),
      app_id: fc.oneof(
        { weight: 9, arbitrary: fc.constant(app.appId) },
        { weight: 1, arbitrary: nastyString },
      ),
      tenant_key: larkish(fc.constant('tenant_emulator')),
    }),
    event: fc.oneof(
      {
        weight: 9,
        arbitrary: fc.record({
          sender: fc.record({
            sender_id: fc.record(
              { open_id: larkish(fc.constant(`ou_${'f'.repeat(16)}`)) },
              { requiredKeys: [] },
            ),
            sender_type: fc.oneof(
              { weight: 6, arbitrary: fc.constant('user') },
              { weight: 1, arbitrary: larkish(fc.constant('app')) },
            ),
            tenant_key: larkish(fc.constant('tenant_emulator')),
          }),
          message: fc.record(
            {
              message_id: larkish(fc.constant(null).map(() => `om_${uid('m').slice(2)}`)),
              root_id: larkish(fc.constant('om_root')),
              thread_id: larkish(fc.constant('omt_thread')),
              create_time: larkish(fc.constant(null).map(() => String(Date.now()))),
              chat_id: larkish(fc.constantFrom(...chatIds)),
              chat_type: larkish(fc.constantFrom('p2p', 'group')),
              message_type: larkish(fc.constantFrom('text', 'image', 'post')),
              content: fc.oneof(
                { weight: 4, arbitrary: text.map((t) => JSON.stringify({ text: t })) },
                { weight: 1, arbitrary: nastyString },
              ),
            },
            {
              requiredKeys: ['message_id', 'create_time', 'chat_id', 'chat_type', 'message_type', 'content'],
            },
          ),
        }),
      },
      { weight: 1, arbitrary: nastyJson },
    ),
  });
}

describe('fuzz: the Lark webhook', () => {
  itFuzzes('unsigned: anything anyone can send is a 4xx, writes nothing, leaks no secret', pool, () => ({
    group: 'webhook (unsigned)',
    secrets: appSecrets(),
    targets: [ROUTE],
    label: (route) => route,
    cases: () => unsignedCase,
    check: async (group, build) => {
      const { status } = await group.send(build());
      // Without an installation's keys nothing is accepted.
      if (status < 400) throw new Error(`an unsigned delivery was accepted (${status})`);
    },
  }));

  itFuzzes(
    'signed: hostile content, signed as Lark signs it, is never a 5xx and a refusal writes nothing',
    pool,
    () => {
      const cases = fc.record({
        app: fc.constantFrom('encrypted', 'plain'),
        payload: fc.constant(null),
        misroute: fc.oneof(
          { weight: 12, arbitrary: fc.constant(false) },
          { weight: 1, arbitrary: fc.constant(true) },
        ),
      });
      const payloads = { encrypted: messageEvent(encrypted), plain: messageEvent(plain) };
      return {
        group: 'webhook (signed)',
        secrets: appSecrets(),
        targets: [ROUTE],
        label: (route) => route,
        cases: () =>
          cases.chain((c) => payloads[c.app as 'encrypted' | 'plain'].map((payload) => ({ ...c, payload }))),
        check: async (group, { app, payload, misroute }) => {
          const signer = app === 'encrypted' ? encrypted : plain;
          const built = await buildEvent(signer, { type: 'custom', payload });
          // Misrouted: signed for one installation, posted to the other (its keys differ).
          const target = misroute ? (app === 'encrypted' ? plain : encrypted) : signer;
          await group.send(post(target.installationId, built.request.headers, built.request.body));
        },
      };
    },
  );
});
