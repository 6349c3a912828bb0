/**
 * Structured JSON logs, one object per line. Two guards, so a careless call site cannot leak
 * a credential:
 *  - by field name: fields whose name could carry a secret are replaced before serialisation;
 *  - by value: every secret value this isolate knows (registerSecret: the configured secrets,
 *    opened sealed values, app secrets given to a Lark client, tenant tokens) is scrubbed from
 *    the serialised line, under whatever key, inside error messages and strings alike.
 */
type Level = 'debug' | 'info' | 'warn' | 'error';
type Fields = Record<string, unknown>;

const ORDER: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };
const SECRET_FIELD =
  /secret|token|password|authorization|snapshot|encrypt|credential|cookie|connectionstring|^key$|_key$|ciphertext/i;
let threshold: Level = 'info';

/**
 * Shorter values are not registered: scrubbing them would mangle ordinary text, and no secret
 * the service issues or accepts by configuration is that short (ADMIN_TOKEN ≥ 24, SECRET_KEYS
 * ≥ 40, ACTOR_JWT_SECRET ≥ 32; Lark app secrets and tokens are 32+).
 */
const MIN_SECRET_LENGTH = 8;
/** Most recently registered first out of the way last: a bounded registry per isolate. */
const MAX_SECRETS = 4096;
const secrets = new Map<string, string>();

/**
 * Remembers a secret value so no log line ever prints it, under any key. Idempotent and
 * cheap: call it wherever a secret enters memory. Also keeps its JSON-escaped form, which is
 * how a value with quotes, backslashes or control characters appears in a serialised line.
 */
export function registerSecret(value: string | null | undefined): void {
  if (typeof value !== 'string' || value.length < MIN_SECRET_LENGTH) return;
  if (secrets.has(value)) {
    // Refresh its place: the registry drops the least recently registered values first.
    secrets.delete(value);
  } else if (secrets.size >= MAX_SECRETS) {
    secrets.delete(secrets.keys().next().value as string);
  }
  secrets.set(value, JSON.stringify(value).slice(1, -1));
}

/** Every registered secret value replaced in `line` (the alerts Tail Worker reuses it). */
export function scrub(line: string): string {
  let out = line;
  for (const [raw, escaped] of secrets) {
    if (out.includes(escaped)) out = out.replaceAll(escaped, '[redacted]');
    if (raw !== escaped && out.includes(raw)) out = out.replaceAll(raw, '[redacted]');
  }
  return out;
}

export function setLogLevel(level: Level): void {
  threshold = level;
}

/**
 * An error's class: its `name`, or its constructor's name when the name is generic (the
 * Postgres driver's DatabaseError is named 'error'). Its `code` (SQLSTATE, Lark code) when set.
 */
function describeError(e: Error): Fields {
  const ctor = e.constructor?.name;
  const name = /^error$/i.test(e.name) && ctor && ctor !== 'Error' ? ctor : e.name;
  const code = (e as { code?: unknown }).code;
  return {
    name,
    message: e.message,
    ...(typeof code === 'string' || typeof code === 'number' ? { code } : {}),
  };
}

function describeEvent(e: Event): Fields {
  const { message, error } = e as Event & { message?: unknown; error?: unknown };
  return {
    name: e.constructor?.name || 'Event',
    message: typeof message === 'string' && message ? message : e.type,
    ...(error instanceof Error ? { cause: describeError(error) } : {}),
  };
}

/** Fields whose name could carry a secret replaced, errors described, depth bounded (reused by workers/alerts). */
export function redact(value: unknown, depth = 0): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (value instanceof Error) return describeError(value);
  // A WebSocket's error event, which the Neon driver emits as the error of a lost connection:
  // its fields are prototype getters, so the loop below printed only the `client` pg-pool sets
  // on it (the driver's whole client, never the cause).
  if (typeof Event === 'function' && value instanceof Event) return describeEvent(value);
  // Deeper than this is a library's internals (a driver's client, a socket): never printed.
  if (depth > 4) return '[truncated]';
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1));
  const out: Fields = {};
  for (const [k, v] of Object.entries(value))
    out[k] = SECRET_FIELD.test(k) ? '[redacted]' : redact(v, depth + 1);
  return out;
}

function emit(level: Level, event: string, fields: Fields = {}): void {
  if (ORDER[level] < ORDER[threshold]) return;
  const line = scrub(
    JSON.stringify({
      level,
      event,
      time: new Date().toISOString(),
      ...(redact(fields) as Fields),
    }),
  );
  if (level === 'error') console.error(line);
  else if (level === 'warn') console.warn(line);
  else console.log(line);
}

export const log = {
  debug: (event: string, fields?: Fields) => emit('debug', event, fields),
  info: (event: string, fields?: Fields) => emit('info', event, fields),
  warn: (event: string, fields?: Fields) => emit('warn', event, fields),
  error: (event: string, fields?: Fields) => emit('error', event, fields),
};
