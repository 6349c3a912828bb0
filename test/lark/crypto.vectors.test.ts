import { describe, expect, it } from 'vitest';
import { computeSignature, DecryptError, decryptEvent } from '../../workers/lark/crypto';
import { encryptEvent } from '../helpers/lark-crypto';
import { buildEvent, installApp } from './helpers';

describe('Lark event crypto (WebCrypto, inside workerd)', () => {
  it('decrypts the official docs vector', async () => {
    expect(await decryptEvent('P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=', 'test key')).toBe(
      'hello world',
    );
  });

  it('decrypts the node-sdk challenge vector', async () => {
    const encrypted =
      'tT1xP+ovuc0T3b/rnZX3ax76exqAn0ANQ6/U45GcciC0mgNBc8JtvqOJGNAPMKpgRs2dVU1NYk9VDeqS8T4SYtU0hzNU54aS84WnxvZ3VFfDcy/RyABlNqlUiGyLDzFI0yxdCMT4KR/YEQXlt6nZi50KwRlZ+A75r645KesZuLMljezYyY8VeeXEVjPw35+e';
    expect(JSON.parse(await decryptEvent(encrypted, 'mazhe.nerd'))).toEqual({
      challenge: '5634b122-c042-4634-bc7f-b07a3c3e77ad',
      token: 'iRdCP2WwXNBXRM3mGLqhrgch3cn0gbT6',
      type: 'url_verification',
    });
  });

  it('refuses a wrong key or garbage with DecryptError', async () => {
    await expect(
      decryptEvent('P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=', 'other key'),
    ).rejects.toBeInstanceOf(DecryptError);
    await expect(decryptEvent('not base64 at all!', 'test key')).rejects.toBeInstanceOf(DecryptError);
  });

  it('decrypts a Lark-style encryption with a random IV', async () => {
    const text = JSON.stringify({ hello: 'wörld', n: 1 });
    expect(await decryptEvent(await encryptEvent(text, 'k1'), 'k1')).toBe(text);
  });

  it('signs over the raw body bytes: a pretty-printed body verifies as sent', async () => {
    const app = await installApp();
    const built = await buildEvent(app, { pretty: true });
    const { headers, body } = built.request;
    expect(body).toContain('\n  ');
    const raw = new TextEncoder().encode(body);
    const sig = await computeSignature(
      headers['x-lark-request-timestamp']!,
      headers['x-lark-request-nonce']!,
      app.encryptKey!,
      raw,
    );
    expect(sig).toBe(headers['x-lark-signature']);
    // Re-serialising the same JSON compactly changes the bytes, and so the signature.
    const compact = new TextEncoder().encode(JSON.stringify(JSON.parse(body)));
    const other = await computeSignature(
      headers['x-lark-request-timestamp']!,
      headers['x-lark-request-nonce']!,
      app.encryptKey!,
      compact,
    );
    expect(other).not.toBe(sig);
  });
});
