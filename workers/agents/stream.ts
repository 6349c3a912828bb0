import { AppError } from '../errors';
import { AgentEvent } from './contract';
import type { AgentReply } from './types';

/**
 * Agent protocol v2 (docs/channel.md "Agent protocol"): instead of `{"text"}` an agent may
 * answer with a stream of events, one JSON object per line (`application/x-ndjson`) or per
 * Server-Sent Event's `data` (`text/event-stream`):
 *   {"type":"delta","text":"..."}   more text, appended to what came before
 *   {"type":"status","status":"..."} progress only (never shown as reply text)
 *   {"type":"done","text":"..."}    the whole answer; the stream ends here
 *   {"type":"error","code":"...","message":"..."}  the agent gave up on this turn
 * A stream that breaks the protocol (not JSON, an unknown event, text past the reply limit,
 * anything after `done`, an end without `done`, bytes that are not UTF-8) fails the generation with
 * `agent_stream_invalid`; an `error` event with `agent_failed`. Hand-written: the framing is
 * two line formats, and the rules are this service's own contract.
 */
export type { AgentEvent } from './contract';

export type StreamFormat = 'ndjson' | 'sse';

/** The stream format a response's content type names, or null for today's JSON answer. */
export function streamFormatOf(contentType: string | null): StreamFormat | null {
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (type === 'application/x-ndjson') return 'ndjson';
  if (type === 'text/event-stream') return 'sse';
  return null;
}

const invalid = (why: string) => new AppError('agent_stream_invalid', `agent stream: ${why}`);

export interface ReadStreamOptions {
  /** The reply text limit: accumulated or final text past it fails the stream. */
  maxChars: number;
  /** Called with the whole text so far after each delta (a streaming reply's source). */
  onText?: (textSoFar: string) => void;
}

/**
 * Reads an agent's event stream to its end and returns the `done` text. Bounded: a line (or an
 * SSE event) longer than the text limit can hold fails at once, so a stream without newlines
 * cannot grow memory; the caller's signal (the agent timeout) bounds the time.
 */
export async function readAgentStream(
  body: ReadableStream<Uint8Array>,
  format: StreamFormat,
  opts: ReadStreamOptions,
): Promise<AgentReply> {
  // JSON escapes can make one character up to 12 bytes (\\uXXXX twice for a surrogate pair).
  const maxLine = opts.maxChars * 12 + 1024;
  const events = agentEvents(opts);
  const onLine = eventFramer(format, maxLine, events.onEvent);
  const reader = body.getReader();
  try {
    await readLines(reader, maxLine, onLine);
    // An SSE event still open at the end counts as ended.
    if (format === 'sse') onLine('');
  } catch (err) {
    // Handled by design: the stream is abandoned (its agent connection closed) and the
    // generation fails with the error thrown here, or the read's own (the timeout's abort).
    await reader.cancel().catch(() => undefined);
    throw err;
  }
  const done = events.done();
  if (done === null) throw invalid('it ended without done');
  return { text: done };
}

/**
 * The protocol's rules for each event: JSON of a known shape, text within the limit, nothing
 * after `done`; `done()` is the final text once it came (else null).
 */
function agentEvents(opts: ReadStreamOptions) {
  let text = '';
  let done: string | null = null;
  const onEvent = (raw: string) => {
    if (done !== null) throw invalid('an event after done');
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      throw invalid('an event that is not JSON');
    }
    const event = AgentEvent.safeParse(parsed);
    if (!event.success) throw invalid('an event of no known shape');
    const e = event.data;
    if (e.type === 'delta') {
      text += e.text;
      if (text.length > opts.maxChars) throw invalid(`text past ${opts.maxChars} characters`);
      opts.onText?.(text);
    } else if (e.type === 'done') {
      if (e.text.length > opts.maxChars) throw invalid(`text past ${opts.maxChars} characters`);
      done = e.text;
    } else if (e.type === 'error')
      throw new AppError('agent_failed', `agent reported an error${e.code ? ` (${e.code})` : ''}`);
  };
  return { onEvent, done: () => done };
}

/** The framing: NDJSON is an event per non-blank line; SSE joins `data:` lines until a blank one. */
function eventFramer(format: StreamFormat, maxLine: number, onEvent: (raw: string) => void) {
  let sseData: string[] = [];
  return (line: string) => {
    if (format === 'ndjson') {
      if (line.trim() !== '') onEvent(line);
      return;
    }
    // SSE: `data:` lines make one event, a blank line ends it; comments and other fields
    // (event, id, retry) carry nothing here.
    if (line === '') {
      if (sseData.length > 0) onEvent(sseData.join('\n'));
      sseData = [];
    } else if (line.startsWith('data:')) {
      sseData.push(line.slice(line.startsWith('data: ') ? 6 : 5));
      if (sseData.reduce((n, d) => n + d.length, 0) > maxLine) throw invalid('an event past the size limit');
    }
  };
}

/** Each line of the body, without its line end, to `onLine`; the last one needs no newline. */
async function readLines(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  maxLine: number,
  onLine: (line: string) => void,
): Promise<void> {
  const decode = utf8Decoder();
  let buffered = '';
  for (;;) {
    const { value, done: ended } = await reader.read();
    if (ended) break;
    buffered += decode(value);
    let newline = buffered.indexOf('\n');
    while (newline !== -1) {
      onLine(buffered.slice(0, newline).replace(/\r$/, ''));
      buffered = buffered.slice(newline + 1);
      newline = buffered.indexOf('\n');
    }
    if (buffered.length > maxLine) throw invalid('a line past the size limit');
  }
  // A character cut off by the end is not UTF-8 either.
  buffered += decode();
  if (buffered !== '') onLine(buffered.replace(/\r$/, ''));
}

/**
 * Fatal: NDJSON and SSE are UTF-8 text, and bytes that are not UTF-8 break the protocol (a
 * replacing decoder would pass them on as U+FFFD in the reply). Found by the fuzz suite.
 */
function utf8Decoder(): (bytes?: Uint8Array) => string {
  const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });
  return (bytes) => {
    try {
      return bytes ? decoder.decode(bytes, { stream: true }) : decoder.decode();
    } catch {
      throw invalid('bytes that are not UTF-8');
    }
  };
}
