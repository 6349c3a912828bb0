/**
 * The text and JSON body of one notification. Never a secret: the fields are redacted again
 * with workers/log.ts's rules (by field name; by value, every secret this isolate registered,
 * the webhook URL among them), credentials in URLs and bearer tokens are cut out, and every
 * value is bounded (a notification is a pointer to the logs, not a copy of them).
 */
import { redact, scrub } from '../log';
import type { AlertLine } from './events';
import type { Admitted } from './gate';

export type WebhookFormat = 'slack' | 'lark';

const MAX_VALUE = 200;
const MAX_FIELDS = 8;
const MAX_TEXT = 1500;

/** Secrets that can sit inside ordinary text: a URL's user:password@, a bearer token. */
function scrubPatterns(text: string): string {
  return text
    .replace(/(\b[a-z][a-z0-9+.-]*:\/\/)[^\s/@:]*:[^\s/@]*@/gi, '$1[redacted]@')
    .replace(/\b(bearer)\s+[A-Za-z0-9._~+/=-]+/gi, '$1 [redacted]');
}

const bounded = (text: string) => (text.length > MAX_VALUE ? `${text.slice(0, MAX_VALUE)}…` : text);

/** `name=value` pairs of a line's fields, redacted and bounded. */
export function describeFields(fields: Record<string, unknown>): string {
  const safe = redact(fields) as Record<string, unknown>;
  return Object.entries(safe)
    .slice(0, MAX_FIELDS)
    .map(([k, v]) => {
      const text =
        v && typeof v === 'object' && 'message' in v && 'name' in v
          ? `${(v as { name: unknown }).name}: ${(v as { message: unknown }).message}${
              'code' in v ? ` (${(v as { code: unknown }).code})` : ''
            }`
          : typeof v === 'string'
            ? v
            : JSON.stringify(v);
      return `${k}=${bounded(scrubPatterns(scrub(text ?? 'null')))}`;
    })
    .join(', ');
}

export function notificationText(line: AlertLine, admitted: Admitted, windowMinutes: number): string {
  const parts = [`[${line.level}] ${line.event} on ${line.worker}`];
  const fields = describeFields(line.fields);
  if (fields) parts.push(fields);
  const notes: string[] = [];
  if (admitted.repeatsBefore > 0)
    notes.push(`${admitted.repeatsBefore} more of these in the previous ${windowMinutes} min window`);
  if (admitted.heldBack > 0) notes.push(`${admitted.heldBack} other alert(s) held back by the rate limit`);
  if (notes.length) parts.push(`(${notes.join('; ')})`);
  parts.push(
    `Repeats are counted, not sent, for ${windowMinutes} min. What to do: docs/operations.md, "Alerts to set" / "Every caught failure has an event".`,
  );
  const text = scrubPatterns(scrub(parts.join('\n')));
  return text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT)}…` : text;
}

/** The webhook body: Slack's incoming webhook, or a Lark (Feishu) custom bot's text message. */
export function payload(format: WebhookFormat, text: string): unknown {
  return format === 'lark' ? { msg_type: 'text', content: { text } } : { text };
}
