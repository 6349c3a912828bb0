import { AppError } from '../errors';
import { constantTimeEqual } from '../lib/constant-time';
import { DecryptError, decryptEvent, signatureMatches, timestampSkewMs } from './crypto';
import { EncryptedBody, EventEnvelope, LegacyEventEnvelope, UrlVerification } from './schemas';

/**
 * Signed requests older or newer than this are refused. Lark does not document the replay
 * window or whether retries are re-signed (UNCONFIRMED); replays inside the window are
 * harmless anyway because event_id dedup outlives it.
 */
export const MAX_TIMESTAMP_SKEW_MS = 10 * 60_000;

export interface DeliveryKeys {
  verificationToken: string;
  encryptKey: string | null;
  appId: string;
}

export type Delivery =
  | { kind: 'challenge'; challenge: string }
  | { kind: 'event'; envelope: EventEnvelope }
  | { kind: 'legacy' };

const reject = (
  code: 'lark_bad_signature' | 'lark_stale_timestamp' | 'lark_bad_token' | 'lark_bad_event',
  msg: string,
) => new AppError(code, msg);

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw reject('lark_bad_event', 'Body is not JSON');
  }
}

/**
 * Authenticates and opens one webhook delivery, in Lark's order: signature over the raw
 * bytes (when an Encrypt Key is set), decryption, then the verification token. Throws an
 * AppError with a stable lark_* code; nothing has been written when it does.
 */
export async function openDelivery(
  raw: Uint8Array,
  headers: Headers,
  keys: DeliveryKeys,
  nowMs: number,
): Promise<Delivery> {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(raw);
  } catch {
    throw reject('lark_bad_event', 'Body is not UTF-8');
  }
  const signature = headers.get('x-lark-signature');
  const signed = keys.encryptKey !== null && signature !== null;
  if (signed) {
    const timestamp = headers.get('x-lark-request-timestamp') ?? '';
    const nonce = headers.get('x-lark-request-nonce') ?? '';
    const skew = timestampSkewMs(timestamp, nowMs);
    if (skew === undefined || skew > MAX_TIMESTAMP_SKEW_MS)
      throw reject('lark_stale_timestamp', 'Request timestamp is missing or outside the allowed window');
    if (!(await signatureMatches(signature, timestamp, nonce, keys.encryptKey!, raw)))
      throw reject('lark_bad_signature', 'Signature does not match');
  }
  let payload = parseJson(text);
  const encrypted = EncryptedBody.safeParse(payload);
  if (encrypted.success) {
    if (!keys.encryptKey)
      throw reject('lark_bad_event', 'Encrypted payload but no Encrypt Key is configured');
    try {
      payload = parseJson(await decryptEvent(encrypted.data.encrypt, keys.encryptKey));
    } catch (err) {
      if (err instanceof DecryptError) throw reject('lark_bad_event', 'Payload does not decrypt');
      throw err;
    }
  }
  const challenge = UrlVerification.safeParse(payload);
  if (challenge.success) {
    // Lark does not sign the URL check; the token (inside the encryption, if any) is the proof.
    checkToken(challenge.data.token, keys.verificationToken);
    return { kind: 'challenge', challenge: challenge.data.challenge };
  }
  if (keys.encryptKey && !signed) throw reject('lark_bad_signature', 'Signature headers are missing');
  const envelope = EventEnvelope.safeParse(payload);
  if (envelope.success) {
    checkToken(envelope.data.header.token, keys.verificationToken);
    if (envelope.data.header.app_id !== keys.appId)
      throw reject('lark_bad_token', 'Event is for another app');
    return { kind: 'event', envelope: envelope.data };
  }
  const legacy = LegacyEventEnvelope.safeParse(payload);
  if (legacy.success) {
    checkToken(legacy.data.token, keys.verificationToken);
    return { kind: 'legacy' };
  }
  throw reject('lark_bad_event', 'Payload is not a Lark event');
}

function checkToken(given: string, expected: string): void {
  if (!constantTimeEqual(given, expected))
    throw reject('lark_bad_token', 'Verification token does not match');
}
