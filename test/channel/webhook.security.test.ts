import { afterAll, describe, expect, it } from 'vitest';
import { testPool } from '../helpers/db';
import { buildEvent, installApp, submit } from '../lark/helpers';

const pool = testPool(2);
afterAll(() => pool.end());

async function written(installationId: string) {
  const { rows } = await pool.query<{ receipts: number; inputs: number }>(
    `select (select count(*)::int from lark_event_receipts where installation_id = $1) as receipts,
            (select count(*)::int from lark_inbound_messages where installation_id = $1) as inputs`,
    [installationId],
  );
  return rows[0]!;
}

async function expectRejected(res: Response, status: number, code: string) {
  expect(res.status).toBe(status);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe(code);
}

describe('webhook rejects what Lark did not send, writing nothing', () => {
  it('forged signature → 401 lark_bad_signature', async () => {
    const app = await installApp();
    const built = await buildEvent(app, { signWithKey: 'not-the-key' });
    await expectRejected(await submit(app.installationId, built.request), 401, 'lark_bad_signature');
    expect(await written(app.installationId)).toEqual({ receipts: 0, inputs: 0 });
  });

  it('a body altered after signing → 401 lark_bad_signature', async () => {
    const app = await installApp();
    const built = await buildEvent(app);
    const tampered = { ...built.request, body: `${built.request.body} ` };
    await expectRejected(await submit(app.installationId, tampered), 401, 'lark_bad_signature');
    expect(await written(app.installationId)).toEqual({ receipts: 0, inputs: 0 });
  });

  it('missing signature headers on an encrypted event → 401 lark_bad_signature', async () => {
    const app = await installApp();
    const built = await buildEvent(app);
    const headers = { 'content-type': 'application/json' };
    await expectRejected(
      await submit(app.installationId, { headers, body: built.request.body }),
      401,
      'lark_bad_signature',
    );
    expect(await written(app.installationId)).toEqual({ receipts: 0, inputs: 0 });
  });

  it('wrong verification token → 401 lark_bad_token (encrypted and plain)', async () => {
    const enc = await installApp();
    await expectRejected(
      await submit(enc.installationId, (await buildEvent(enc, { token: 'wrong' })).request),
      401,
      'lark_bad_token',
    );
    const plain = await installApp({ encrypt: false });
    await expectRejected(
      await submit(plain.installationId, (await buildEvent(plain, { token: 'wrong' })).request),
      401,
      'lark_bad_token',
    );
    expect(await written(enc.installationId)).toEqual({ receipts: 0, inputs: 0 });
    expect(await written(plain.installationId)).toEqual({ receipts: 0, inputs: 0 });
  });

  it('stale timestamp → 401 lark_stale_timestamp, even with a valid signature', async () => {
    const app = await installApp();
    const built = await buildEvent(app, { timestampSec: Math.floor(Date.now() / 1000) - 3600 });
    await expectRejected(await submit(app.installationId, built.request), 401, 'lark_stale_timestamp');
    expect(await written(app.installationId)).toEqual({ receipts: 0, inputs: 0 });
  });

  it('malformed body → 400 lark_bad_event', async () => {
    const app = await installApp({ encrypt: false });
    const headers = { 'content-type': 'application/json' };
    await expectRejected(
      await submit(app.installationId, { headers, body: '{"schema":"2.0",' }),
      400,
      'lark_bad_event',
    );
    await expectRejected(
      await submit(app.installationId, { headers, body: '{"hello":"world"}' }),
      400,
      'lark_bad_event',
    );
    // A valid envelope whose message event breaks the schema.
    const bad = await buildEvent(app, {
      type: 'custom',
      payload: {
        schema: '2.0',
        header: {
          event_id: 'e1',
          event_type: 'im.message.receive_v1',
          create_time: '1',
          token: app.verificationToken,
          app_id: app.appId,
        },
        event: { sender: { sender_type: 'user' }, message: { message_id: 42 } },
      },
    });
    await expectRejected(await submit(app.installationId, bad.request), 400, 'lark_bad_event');
    expect(await written(app.installationId)).toEqual({ receipts: 0, inputs: 0 });
  });

  it('an encrypted payload that does not decrypt → 400 lark_bad_event', async () => {
    const app = await installApp();
    const other = await installApp();
    // Signed with this app's key, but encrypted under another app's key.
    const built = await buildEvent(other, {});
    const { computeSignature } = await import('../../workers/lark/crypto');
    const ts = String(Math.floor(Date.now() / 1000));
    const sig = await computeSignature(
      ts,
      'n',
      app.encryptKey!,
      new TextEncoder().encode(built.request.body),
    );
    const headers = { 'x-lark-request-timestamp': ts, 'x-lark-request-nonce': 'n', 'x-lark-signature': sig };
    await expectRejected(
      await submit(app.installationId, { headers, body: built.request.body }),
      400,
      'lark_bad_event',
    );
    expect(await written(app.installationId)).toEqual({ receipts: 0, inputs: 0 });
  });

  it('unknown installation → 404 lark_unknown_installation', async () => {
    const app = await installApp();
    const built = await buildEvent(app);
    await expectRejected(await submit('li_doesnotexist', built.request), 404, 'lark_unknown_installation');
    await expectRejected(await submit('not-an-id', built.request), 404, 'lark_unknown_installation');
  });

  it('an event for another app → 401 lark_bad_token', async () => {
    const app = await installApp({ encrypt: false });
    const other = await installApp({ encrypt: false });
    const built = await buildEvent(other, { token: app.verificationToken });
    await expectRejected(await submit(app.installationId, built.request), 401, 'lark_bad_token');
  });
});
