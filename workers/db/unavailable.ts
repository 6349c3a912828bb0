/**
 * Whether an error means the database could not answer this request (connection lost or
 * refused, the server shutting it down, a lock or statement timeout), as opposed to a bug or
 * bad data. Such a request answers 503 `service_unavailable` with Retry-After, never a 500:
 * the chaos run (chaos/) found a connection dropped mid-statement rendered as a 500
 * `internal_error` on the webhook and on /v1 writes.
 *
 * SQLSTATE class 08 (connection exception), 57P01..57P03 (terminated by the server, cannot
 * connect now), 55P03 (lock_timeout), 57014 (statement_timeout). The driver's own messages
 * cover a socket that ended without a SQLSTATE: pg-protocol's "Connection terminated
 * unexpectedly" and workerd's "Network connection lost".
 */
const CODES = new Set(['57P01', '57P02', '57P03', '55P03', '57014']);
const MESSAGES = [
  'Connection terminated unexpectedly',
  'Connection terminated due to connection timeout',
  'Network connection lost',
  'timeout exceeded when trying to connect',
];

export function isDatabaseUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && (CODES.has(code) || code.startsWith('08'))) return true;
  return MESSAGES.some((m) => err.message.includes(m));
}
