/**
 * The signature on every request to the HTTP agent (docs/channel.md "Agent requests are
 * signed"), in the shape Lark and Slack use for theirs: the agent recomputes
 * HMAC-SHA256(AGENT_SIGNING_SECRET, `${timestamp}.${body}`) over the raw body it received and
 * compares it with the header in constant time, and refuses a timestamp far from its clock
 * (a replayed request). Written here rather than taken from a library: it is three WebCrypto
 * calls, and the format is this service's own contract with its agents.
 */
export const SIGNATURE_HEADER = 'x-agent-signature';
export const TIMESTAMP_HEADER = 'x-agent-timestamp';
export const IDEMPOTENCY_HEADER = 'idempotency-key';
/**
 * The protocol version this service speaks (docs/channel.md "Agent protocol"): 2 = a JSON
 * answer or an event stream. An agent that knows only version 1 answers JSON, which version 2
 * still reads; a future version that changes the request gets a new number here.
 */
export const PROTOCOL_HEADER = 'x-agent-protocol';
export const AGENT_PROTOCOL_VERSION = 2;
/** The version prefix of the signature value: `v1=<hex>`; a new scheme gets a new prefix. */
const VERSION = 'v1';

const encoder = new TextEncoder();
const keys = new Map<string, Promise<CryptoKey>>();

function keyOf(secret: string): Promise<CryptoKey> {
  let key = keys.get(secret);
  if (!key) {
    key = crypto.subtle.importKey('raw', encoder.encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, [
      'sign',
    ]);
    keys.set(secret, key);
  }
  return key;
}

/** `v1=<hex of HMAC-SHA256(secret, "<timestamp>.<body>")>`. */
export async function agentSignature(secret: string, timestamp: number, body: string): Promise<string> {
  const mac = await crypto.subtle.sign('HMAC', await keyOf(secret), encoder.encode(`${timestamp}.${body}`));
  return `${VERSION}=${[...new Uint8Array(mac)].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
}

/** The idempotency key of one agent call: the same for a retry of the same generation. */
export function agentIdempotencyKey(turn: { sessionId: string; turnNo: number; generation: number }): string {
  return `${turn.sessionId}:${turn.turnNo}:${turn.generation}`;
}
