/**
 * Builds event deliveries exactly as Lark sends them: schema 2.0 envelope, AES-256-CBC
 * encryption with a random IV when the app has an Encrypt Key, and the X-Lark-Signature
 * over the raw body bytes. Uses node:crypto, independent of the Worker's WebCrypto code.
 */
import { createCipheriv, createHash, randomBytes } from 'node:crypto';
import { type AppRecord, id, type MessageRecord } from './state';

/** What a delivery needs of an app: its keys, not its bot. */
type DeliveryApp = Omit<AppRecord, 'bot_open_id'>;

export interface SignedRequest {
  headers: Record<string, string>;
  body: string;
}

export function larkEncrypt(plaintext: string, encryptKey: string): string {
  const key = createHash('sha256').update(encryptKey, 'utf8').digest();
  const iv = randomBytes(16);
  const cipher = createCipheriv('aes-256-cbc', key, iv);
  return Buffer.concat([iv, cipher.update(plaintext, 'utf8'), cipher.final()]).toString('base64');
}

export function larkSign(timestamp: string, nonce: string, encryptKey: string, body: string): string {
  return createHash('sha256')
    .update(timestamp + nonce + encryptKey, 'utf8')
    .update(Buffer.from(body, 'utf8'))
    .digest('hex');
}

export interface DeliveryOptions {
  /** Seconds since epoch for X-Lark-Request-Timestamp; defaults to the emulator's now. */
  timestampSec?: number;
  /** Pretty-print the outer JSON body (still signed over its raw bytes). */
  pretty?: boolean;
  /** Override: send plain JSON even when the app has an Encrypt Key. */
  plain?: boolean;
  /** Sign with this key instead of the app's (to forge a signature). */
  signWithKey?: string;
}

/** Serialises, optionally encrypts, and signs a payload for one app. */
export function buildDelivery(
  app: DeliveryApp,
  payload: unknown,
  nowMs: number,
  opts: DeliveryOptions = {},
): SignedRequest {
  const inner = JSON.stringify(payload);
  const encrypt = app.encrypt_key && !opts.plain;
  const outer = encrypt ? { encrypt: larkEncrypt(inner, app.encrypt_key!) } : payload;
  const body = opts.pretty ? JSON.stringify(outer, null, 2) : JSON.stringify(outer);
  const headers: Record<string, string> = { 'content-type': 'application/json; charset=utf-8' };
  const key = opts.signWithKey ?? app.encrypt_key;
  // Lark signs only when an Encrypt Key is configured, and never the url_verification.
  const isChallenge = (payload as { type?: string }).type === 'url_verification';
  if (key && !isChallenge) {
    const timestamp = String(opts.timestampSec ?? Math.floor(nowMs / 1000));
    const nonce = randomBytes(8).toString('hex');
    headers['x-lark-request-timestamp'] = timestamp;
    headers['x-lark-request-nonce'] = nonce;
    headers['x-lark-signature'] = larkSign(timestamp, nonce, key, body);
  }
  return { headers, body };
}

export function urlVerificationPayload(app: DeliveryApp, token?: string) {
  return { challenge: id('', 16), token: token ?? app.verification_token, type: 'url_verification' };
}

/** An im.message.receive_v1 envelope for a message already in the emulator's world. */
export function messageReceivePayload(
  app: DeliveryApp,
  msg: MessageRecord,
  nowMs: number,
  opts: { eventId?: string; token?: string } = {},
) {
  const senderIsApp = msg.sender.sender_type === 'app';
  return {
    schema: '2.0',
    header: {
      event_id: opts.eventId ?? id('', 16),
      event_type: 'im.message.receive_v1',
      create_time: String(nowMs),
      token: opts.token ?? app.verification_token,
      app_id: app.app_id,
      tenant_key: 'tenant_emulator',
    },
    event: {
      sender: {
        sender_id: senderIsApp
          ? { open_id: msg.sender.id }
          : {
              open_id: msg.sender.id,
              union_id: msg.sender.id.replace(/^ou_/, 'on_'),
              user_id: msg.sender.id.slice(3, 11),
            },
        sender_type: msg.sender.sender_type,
        tenant_key: 'tenant_emulator',
      },
      message: {
        message_id: msg.message_id,
        ...(msg.root_id ? { root_id: msg.root_id } : {}),
        ...(msg.parent_id ? { parent_id: msg.parent_id } : {}),
        ...(msg.thread_id ? { thread_id: msg.thread_id } : {}),
        create_time: msg.create_time,
        update_time: msg.create_time,
        chat_id: msg.chat_id,
        chat_type: msg.chat_type,
        message_type: msg.msg_type,
        content: msg.content,
        ...(msg.mentions ? { mentions: msg.mentions } : {}),
        user_agent: 'emulator',
      },
    },
  };
}

/**
 * An im.message.recalled_v1 envelope (reference §3): `{message_id, chat_id, recall_time,
 * recall_type}` at the top of `event`, or, with `shape: "nested"`, the ids under `message`
 * (the reference does not rule it out; the service accepts both).
 */
export function messageRecalledPayload(
  app: DeliveryApp,
  recall: { message_id: string; chat_id: string; recall_type?: string },
  nowMs: number,
  opts: { eventId?: string; token?: string; shape?: 'flat' | 'nested' } = {},
) {
  const ids = { message_id: recall.message_id, chat_id: recall.chat_id };
  const rest = { recall_time: String(nowMs), recall_type: recall.recall_type ?? 'message_owner' };
  return {
    schema: '2.0',
    header: {
      event_id: opts.eventId ?? id('', 16),
      event_type: 'im.message.recalled_v1',
      create_time: String(nowMs),
      token: opts.token ?? app.verification_token,
      app_id: app.app_id,
      tenant_key: 'tenant_emulator',
    },
    event: opts.shape === 'nested' ? { message: ids, ...rest } : { ...ids, ...rest },
  };
}
