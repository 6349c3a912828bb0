import * as lark from '@larksuiteoapi/node-sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildDelivery, larkEncrypt } from '../../../emulator/events';
import { type LarkEmulator, startLarkEmulator } from '../../../emulator/server';
import { decryptEvent, signatureMatches } from '../../../workers/lark/crypto';
import { encryptEvent } from '../../helpers/lark-crypto';

// Oracle: @larksuiteoapi/node-sdk 1.74.0, Lark's own Node SDK, checks our crypto from outside.
describe('Lark crypto against the official node-sdk', () => {
  it('AESCipher decrypts the published vectors, and so do we', async () => {
    expect(new lark.AESCipher('test key').decrypt('P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=')).toBe(
      'hello world',
    );
    expect(await decryptEvent('P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=', 'test key')).toBe(
      'hello world',
    );
  });

  it('AESCipher decrypts what the emulator (node:crypto) and the Worker (WebCrypto) encrypt', async () => {
    const text = JSON.stringify({ schema: '2.0', hello: 'wörld 👋' });
    expect(new lark.AESCipher('k-1').decrypt(larkEncrypt(text, 'k-1'))).toBe(text);
    expect(new lark.AESCipher('k-1').decrypt(await encryptEvent(text, 'k-1'))).toBe(text);
    expect(await decryptEvent(larkEncrypt(text, 'k-1'), 'k-1')).toBe(text);
  });

  it('EventDispatcher accepts a compact emulator delivery; our check accepts compact and pretty', async () => {
    const app = { app_id: 'cli_oracle', app_secret: 's', verification_token: 'vt', encrypt_key: 'ek' };
    const payload = {
      schema: '2.0',
      header: {
        event_id: 'e1',
        event_type: 'im.message.receive_v1',
        create_time: '1',
        token: 'vt',
        app_id: 'cli_oracle',
      },
      event: { message: { message_id: 'om_1' } },
    };
    let seen: unknown;
    const dispatcher = new lark.EventDispatcher({
      encryptKey: 'ek',
      verificationToken: 'vt',
      loggerLevel: lark.LoggerLevel.error,
    }).register({
      'im.message.receive_v1': async (data: unknown) => {
        seen = data;
      },
    });
    const compact = buildDelivery(app, payload, Date.now());
    const data = Object.create({ headers: compact.headers });
    Object.assign(data, JSON.parse(compact.body));
    await dispatcher.invoke(data);
    expect(seen).toMatchObject({ event_id: 'e1', message: { message_id: 'om_1' } });
    for (const request of [compact, buildDelivery(app, payload, Date.now(), { pretty: true })]) {
      const h = request.headers;
      const ok = await signatureMatches(
        h['x-lark-signature']!,
        h['x-lark-request-timestamp']!,
        h['x-lark-request-nonce']!,
        'ek',
        new TextEncoder().encode(request.body),
      );
      expect(ok).toBe(true);
    }
  });
});

describe('emulator over HTTP', () => {
  let emu: LarkEmulator;
  beforeAll(async () => {
    emu = await startLarkEmulator();
  });
  afterAll(() => emu.close());

  it('issues the same token with a smaller expire, and a new one in the last 30 minutes', async () => {
    let now = Date.UTC(2026, 0, 1);
    const clocked = await startLarkEmulator({ clock: { now: () => now } });
    try {
      clocked.state.registerApp({ app_id: 'cli_t', app_secret: 's', verification_token: 'v' });
      const get = async () =>
        (await (
          await fetch(`${clocked.url}/open-apis/auth/v3/tenant_access_token/internal`, {
            method: 'POST',
            body: JSON.stringify({ app_id: 'cli_t', app_secret: 's' }),
          })
        ).json()) as { tenant_access_token: string; expire: number };
      const a = await get();
      expect(a.expire).toBe(7200);
      now += 60 * 60_000;
      const b = await get();
      expect([b.tenant_access_token, b.expire]).toEqual([a.tenant_access_token, 3600]);
      now += 31 * 60_000;
      const c = await get();
      expect(c.tenant_access_token).not.toBe(a.tenant_access_token);
      expect(c.expire).toBe(7200);
    } finally {
      await clocked.close();
    }
  });

  it('answers an unknown path with a plain-text 404', async () => {
    const res = await fetch(`${emu.url}/open-apis/unknown`);
    expect([res.status, await res.text()]).toEqual([404, '404 page not found']);
  });
});
