import { afterAll, describe, expect, it } from 'vitest';
import { testPool } from '../helpers/db';
import { buildEvent, installApp, submit } from '../lark/helpers';

const pool = testPool(2);
afterAll(() => pool.end());

async function inputs(installationId: string) {
  const { rows } = await pool.query('select * from lark_inbound_messages where installation_id = $1', [
    installationId,
  ]);
  return rows;
}

describe('url_verification', () => {
  it('answers the challenge for a plain request', async () => {
    const app = await installApp({ encrypt: false });
    const built = await buildEvent(app, { type: 'url_verification' });
    const res = await submit(app.installationId, built.request);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ challenge: built.challenge });
  });

  it('answers the challenge for an encrypted request (unsigned, as Lark sends it)', async () => {
    const app = await installApp();
    const built = await buildEvent(app, { type: 'url_verification' });
    expect(built.request.body).toContain('"encrypt"');
    expect(built.request.headers['x-lark-signature']).toBeUndefined();
    const res = await submit(app.installationId, built.request);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ challenge: built.challenge });
  });

  it('refuses a challenge with the wrong token', async () => {
    const app = await installApp();
    const res = await submit(
      app.installationId,
      (await buildEvent(app, { type: 'url_verification', token: 'x' })).request,
    );
    expect(res.status).toBe(401);
  });
});

describe('im.message.receive_v1', () => {
  it('records a signed, encrypted message as one input', async () => {
    const app = await installApp();
    const built = await buildEvent(app, { message: { text: 'hi there' } });
    const res = await submit(app.installationId, built.request);
    expect(res.status).toBe(200);
    const rows = await inputs(app.installationId);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      message_id: built.message_id,
      event_id: built.event_id,
      message_type: 'text',
    });
    expect(JSON.parse(rows[0].content)).toEqual({ text: 'hi there' });
  });

  it('accepts a pretty-printed body signed over its raw bytes', async () => {
    const app = await installApp();
    const built = await buildEvent(app, { pretty: true });
    expect((await submit(app.installationId, built.request)).status).toBe(200);
    expect(await inputs(app.installationId)).toHaveLength(1);
  });

  it('records a plain (unencrypted) message when no Encrypt Key is set', async () => {
    const app = await installApp({ encrypt: false });
    const built = await buildEvent(app);
    expect((await submit(app.installationId, built.request)).status).toBe(200);
    expect(await inputs(app.installationId)).toHaveLength(1);
  });

  it('a duplicate or replayed event_id becomes one input', async () => {
    const app = await installApp();
    const first = await buildEvent(app);
    // Lark's retry: same event, newly signed; and a byte-for-byte replay.
    const retry = await buildEvent(app, { message_id: first.message_id, event_id: first.event_id });
    const answers = await Promise.all([
      submit(app.installationId, first.request),
      submit(app.installationId, first.request),
      submit(app.installationId, retry.request),
    ]);
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(await inputs(app.installationId)).toHaveLength(1);
    const { rows } = await pool.query(
      'select count(*)::int as n from lark_event_receipts where installation_id = $1',
      [app.installationId],
    );
    expect(rows[0].n).toBe(1);
  });

  it('ignores messages sent by the app itself (and other apps)', async () => {
    const app = await installApp();
    const built = await buildEvent(app, { message: { sender_app_id: app.appId } });
    const res = await submit(app.installationId, built.request);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ ignored: 'sender_not_user' });
    expect(await inputs(app.installationId)).toHaveLength(0);
  });

  it('acknowledges and ignores other event types', async () => {
    const app = await installApp();
    const built = await buildEvent(app, {
      type: 'custom',
      payload: {
        schema: '2.0',
        header: {
          event_id: crypto.randomUUID(),
          event_type: 'im.message.reaction.created_v1',
          create_time: '1',
          token: app.verificationToken,
          app_id: app.appId,
        },
        event: { message_id: 'om_x', reaction_type: { emoji_type: 'SMILE' }, operator_type: 'user' },
      },
    });
    const res = await submit(app.installationId, built.request);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ ignored: 'im.message.reaction.created_v1' });
    expect(await inputs(app.installationId)).toHaveLength(0);
  });
});
