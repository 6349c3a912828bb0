/**
 * Structured JSON logs, one object per line. Field names that could carry a secret are
 * replaced before serialisation, so a careless call site cannot leak a credential.
 */
type Level = 'debug' | 'info' | 'warn' | 'error';
type Fields = Record<string, unknown>;

const ORDER: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };
const SECRET_FIELD =
  /secret|token|password|authorization|snapshot|encrypt|credential|cookie|connectionstring|^key$|_key$|ciphertext/i;
let threshold: Level = 'info';

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

function redact(value: unknown, depth = 0): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (value instanceof Error) return describeError(value);
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
  const line = JSON.stringify({
    level,
    event,
    time: new Date().toISOString(),
    ...(redact(fields) as Fields),
  });
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
