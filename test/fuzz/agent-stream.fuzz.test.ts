import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { httpAgent, MAX_REPLY_TEXT } from '../../workers/agents';
import { AgentEvent } from '../../workers/agents/contract';
import { readAgentStream, type StreamFormat } from '../../workers/agents/stream';
import { AppError } from '../../workers/errors';
import { caseTiming, fcParams, fuzzTimeout, type GroupStats, nastyJson, nastyString } from './harness';

/**
 * Hostile agent streams (issue 34, "Bad input"): protocol v2 answers that break the protocol
 * (lines that are not JSON, events of no known shape, lines past any event's size, text past the
 * reply limit, events after `done`, no `done`, bytes that are not UTF-8, `error` events, bodies
 * that stall, drip or break off, HTTP errors), each delivered in chunks cut at random places or
 * at every byte, read by `readAgentStream` directly and through the HTTP agent (its `fetch`, the
 * agent's side of the wire, answers the hostile body; workerd's own streams and decoder read it).
 * The property: every hostile stream fails the generation with its stable code
 * (agent_stream_invalid, agent_failed, agent_timeout), nothing else is ever thrown, no text past
 * the limit is returned or shown (`onText`), and no body is left open. Valid streams, cut the
 * same ways, are the control: they answer their `done` text.
 */
const encoder = new TextEncoder();
const SECRET = 'fuzz-agent-signing-secret-0123456789abcdef';
/** The reader's line bound (stream.ts): a line past it fails even without a newline. */
const MAX_LINE = MAX_REPLY_TEXT * 12 + 1024;
/** The agent timeout of a stalling case; the others get one no load reaches. */
const STALL_TIMEOUT_MS = 40;
const CALM_TIMEOUT_MS = 15_000;

type Code = 'agent_stream_invalid' | 'agent_failed' | 'agent_timeout';
type Ending = 'close' | 'stall' | 'drip' | 'break';

interface StreamCase {
  kind: string;
  format: StreamFormat;
  /** The body, as the agent writes it. */
  body: Uint8Array;
  /** After the body: end it, keep it open (silent, or sending blank lines), or break the connection. */
  ending: Ending;
  expect: { text: string } | { code: Code };
  /** The HTTP answer around it (the HTTP agent only): status and content type. */
  status?: number;
  contentType?: string;
}

// ---- building bodies ------------------------------------------------------------------

const frame = (format: StreamFormat, json: string) =>
  format === 'ndjson' ? `${json}\n` : `data: ${json}\n\n`;
const ev = (format: StreamFormat, e: object) => frame(format, JSON.stringify(e));
const bytes = (...parts: (string | Uint8Array)[]): Uint8Array => {
  const chunks = parts.map((p) => (typeof p === 'string' ? encoder.encode(p) : p));
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
};

const format = fc.constantFrom<StreamFormat>('ndjson', 'sse');
/** Reply text within the limit: any code unit but lone surrogates (they do not survive UTF-8). */
const text = (max: number) =>
  fc.oneof(
    fc.string({ unit: 'grapheme', maxLength: Math.min(max, 40) }),
    fc.string({ maxLength: Math.min(max, 40) }),
    fc.constantFrom('Xin chào 👋', '回答', 'a\nb', 'line\r\n', '"quoted"', '\\', '\u2028'),
  );
/** A well-formed prefix: deltas and status events, their text within the limit. */
const prefix = fc.array(
  fc.oneof(
    text(200).map((t) => ({ type: 'delta' as const, text: t })),
    fc.string({ maxLength: 200 }).map((s) => ({ type: 'status' as const, status: s })),
  ),
  { maxLength: 6 },
);
const doneText = text(200).filter((t) => t.length > 0);

/** A JSON value that is not an event: near misses, then anything at all. */
const notAnEvent = fc
  .oneof(
    fc.constantFrom<unknown>(
      { type: 'delta' },
      { type: 'delta', text: 5 },
      { type: 'Delta', text: 'a' },
      { type: 'done', text: '' },
      { type: 'done' },
      { type: 'status', status: 'x'.repeat(201) },
      { type: 'error', code: 'c'.repeat(101) },
      { type: 'error', message: 'm'.repeat(501) },
      { text: 'no type' },
      [],
      null,
      'delta',
      7,
    ),
    nastyJson,
  )
  .filter((v) => !AgentEvent.safeParse(v).success);
/** A line that is not JSON text (and not blank: a blank NDJSON line is allowed). */
const notJson = nastyString
  .map((s) => s.replace(/[\r\n]/g, ' '))
  .filter((s) => {
    if (s.trim() === '') return false;
    try {
      JSON.parse(s);
      return false;
    } catch {
      return true;
    }
  });
/** Byte sequences UTF-8 forbids: a stray continuation, overlong, a surrogate, past U+10FFFF, cut short. */
const badUtf8 = fc.constantFrom(
  [0x80],
  [0xff],
  [0xfe],
  [0xc0, 0xaf],
  [0xe0, 0x80, 0xaf],
  [0xed, 0xa0, 0x80],
  [0xf4, 0x90, 0x80, 0x80],
  [0xe2, 0x82],
  [0xf0, 0x9f, 0x91],
);

const invalidCode = { code: 'agent_stream_invalid' as const };

/** One hostile (or, for the control, valid) stream, by kind. */
const kinds: Record<string, fc.Arbitrary<Omit<StreamCase, 'ending'> & { ending?: Ending }>> = {
  valid: fc.tuple(format, prefix, doneText, fc.boolean()).map(([f, pre, done, crlf]) => {
    let body = [...pre, { type: 'done', text: done }].map((e) => ev(f, e)).join('');
    // SSE allows comments, other fields and CRLF line ends; NDJSON blank lines.
    if (f === 'sse') body = `: keep-alive\nevent: message\n${body}`;
    else body = `\n${body}\n`;
    if (crlf) body = body.replaceAll('\n', '\r\n');
    return { kind: 'valid', format: f, body: bytes(body), expect: { text: done } };
  }),
  not_json: fc.tuple(format, prefix, notJson).map(([f, pre, line]) => ({
    kind: 'not_json',
    format: f,
    body: bytes(pre.map((e) => ev(f, e)).join(''), frame(f, line)),
    expect: invalidCode,
  })),
  unknown_event: fc.tuple(format, prefix, notAnEvent).map(([f, pre, v]) => ({
    kind: 'unknown_event',
    format: f,
    body: bytes(pre.map((e) => ev(f, e)).join(''), frame(f, JSON.stringify(v))),
    expect: invalidCode,
  })),
  huge_line: fc
    .tuple(format, prefix, fc.integer({ min: 1, max: 4096 }), fc.boolean())
    .map(([f, pre, extra, asDelta]) => {
      // One line past any event the limit allows, never ended: bounded without its newline.
      const filler = 'q'.repeat(MAX_LINE + extra);
      const line = asDelta ? `{"type":"delta","text":"${filler}` : filler;
      return {
        kind: 'huge_line',
        format: f,
        body: bytes(pre.map((e) => ev(f, e)).join(''), f === 'sse' ? `data: ${line}` : line),
        expect: invalidCode,
      };
    }),
  over_limit: fc
    .tuple(format, fc.integer({ min: 1, max: 300 }), fc.integer({ min: 1, max: 4 }), fc.boolean())
    .map(([f, over, pieces, inDone]) => {
      const total = MAX_REPLY_TEXT + over;
      const events = inDone
        ? [{ type: 'done', text: 'w'.repeat(total) }]
        : Array.from({ length: pieces }, (_, i) => ({
            type: 'delta',
            text: 'w'.repeat(Math.ceil(total / pieces) + (i === 0 ? 1 : 0)),
          }));
      return {
        kind: 'over_limit',
        format: f,
        body: bytes(events.map((e) => ev(f, e)).join('')),
        expect: invalidCode,
      };
    }),
  after_done: fc
    .tuple(
      format,
      prefix,
      doneText,
      fc.oneof(
        prefix.filter((p) => p.length > 0).map((p) => JSON.stringify(p[0])),
        fc.constant(JSON.stringify({ type: 'done', text: 'again' })),
        fc.constant(JSON.stringify({ type: 'error', code: 'late' })),
        notJson,
      ),
    )
    .map(([f, pre, done, trailer]) => ({
      kind: 'after_done',
      format: f,
      body: bytes([...pre, { type: 'done', text: done }].map((e) => ev(f, e)).join(''), frame(f, trailer)),
      expect: invalidCode,
    })),
  no_done: fc.tuple(format, prefix).map(([f, pre]) => ({
    kind: 'no_done',
    format: f,
    body: bytes(pre.map((e) => ev(f, e)).join('')),
    expect: invalidCode,
  })),
  invalid_utf8: fc
    .tuple(format, prefix, doneText, text(40), badUtf8, fc.boolean(), fc.nat())
    .map(([f, pre, done, delta, bad, inDone, at]) => {
      // The bad bytes inside an event's text, where a replacing decoder would pass them on as
      // U+FFFD: in a delta before the done, or in the done itself.
      const target = [...(inDone ? done : delta)];
      const cut = at % (target.length + 1);
      const open = `${JSON.stringify({ type: inDone ? 'done' : 'delta', text: target.slice(0, cut).join('') }).slice(0, -2)}`;
      const close = `${JSON.stringify(target.slice(cut).join('')).slice(1)}}`;
      const broken = bytes(
        f === 'sse' ? 'data: ' : '',
        open,
        new Uint8Array(bad),
        close,
        f === 'sse' ? '\n\n' : '\n',
      );
      const body = bytes(
        pre.map((e) => ev(f, e)).join(''),
        broken,
        inDone ? '' : ev(f, { type: 'done', text: done }),
      );
      return { kind: 'invalid_utf8', format: f, body, expect: invalidCode };
    }),
  cut_character: fc.tuple(format, prefix, badUtf8).map(([f, pre, bad]) => ({
    // The body ends inside a character (the end flushes the decoder).
    kind: 'cut_character',
    format: f,
    body: bytes(pre.map((e) => ev(f, e)).join(''), new Uint8Array(bad)),
    expect: invalidCode,
  })),
  error_event: fc
    .tuple(
      format,
      prefix,
      fc.option(fc.string({ maxLength: 100 }), { nil: undefined }),
      fc.option(fc.string({ maxLength: 500 }), { nil: undefined }),
    )
    .map(([f, pre, code, message]) => ({
      kind: 'error_event',
      format: f,
      body: bytes([...pre, { type: 'error', code, message }].map((e) => ev(f, e)).join('')),
      expect: { code: 'agent_failed' as const },
    })),
  // Through the HTTP agent only: what the wire and the answer's status can do.
  stall: fc.tuple(format, prefix, fc.constantFrom<Ending>('stall', 'drip')).map(([f, pre, ending]) => ({
    kind: `stall_${ending}`,
    format: f,
    body: bytes(pre.map((e) => ev(f, e)).join('')),
    ending,
    expect: { code: 'agent_timeout' as const },
  })),
  broken: fc.tuple(format, prefix).map(([f, pre]) => ({
    kind: 'broken',
    format: f,
    body: bytes(pre.map((e) => ev(f, e)).join('')),
    ending: 'break' as const,
    expect: { code: 'agent_failed' as const },
  })),
  http_status: fc
    .tuple(
      format,
      prefix,
      fc
        .integer({ min: 300, max: 599 })
        // A 304 carries no body (a null-body status): nothing to leave open or to close.
        .filter((st) => st !== 304),
      fc.constantFrom<Ending>('close', 'break'),
    )
    .map(([f, pre, status, ending]) => ({
      kind: 'http_status',
      format: f,
      body: bytes(pre.map((e) => ev(f, e)).join('')),
      ending,
      status,
      expect: { code: 'agent_failed' as const },
    })),
};
const HTTP_ONLY = new Set(['stall', 'broken', 'http_status']);

/** Content types naming each format, as agents spell them. */
const contentTypes: Record<StreamFormat, string[]> = {
  ndjson: ['application/x-ndjson', 'application/x-ndjson; charset=utf-8', 'Application/X-NDJSON'],
  sse: ['text/event-stream', 'text/event-stream; charset=utf-8', 'TEXT/EVENT-STREAM'],
};

/** How the body is cut into reads: at every byte (small bodies), or at random places. */
const cuts = fc.oneof(
  fc.constant<'every'>('every'),
  fc.array(fc.integer({ min: 1, max: 4096 }), { minLength: 1, maxLength: 8 }),
);

/** A case of one kind: the stream, how it is read, where its reads are cut. */
const streamCase = (kind: string) =>
  fc
    .record({
      c: kinds[kind]!,
      via: HTTP_ONLY.has(kind)
        ? fc.constant('http' as const)
        : fc.constantFrom('read' as const, 'http' as const),
      cuts,
      typeAt: fc.nat(2),
    })
    .map(({ c, via, cuts: at, typeAt }) => ({
      case: { ending: 'close' as Ending, ...c, contentType: contentTypes[c.format][typeAt]! } as StreamCase,
      via,
      cuts: at,
    }));

// ---- delivering and judging -----------------------------------------------------------

/** The body as the wire delivers it, and whether it was left open when the reader was done. */
function wire(c: StreamCase, cutAt: 'every' | number[], signal?: AbortSignal) {
  const sizes = cutAt === 'every' ? (c.body.length <= 4096 ? [1] : [997]) : cutAt;
  let at = 0;
  let n = 0;
  let state: 'open' | 'ended' | 'cancelled' | 'errored' = 'open';
  let drip: ReturnType<typeof setInterval> | undefined;
  const stop = () => clearInterval(drip);
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      // A real fetch's body fails when its request is aborted (the agent timeout).
      signal?.addEventListener('abort', () => {
        stop();
        if (state !== 'open') return;
        state = 'errored';
        controller.error(signal.reason);
      });
    },
    pull(controller) {
      if (at < c.body.length) {
        const size = sizes[n++ % sizes.length]!;
        controller.enqueue(c.body.slice(at, at + size));
        at += size;
        return;
      }
      if (c.ending === 'close') {
        state = 'ended';
        controller.close();
      } else if (c.ending === 'break') {
        state = 'errored';
        controller.error(new TypeError('Network connection lost.'));
      } else if (c.ending === 'drip' && !drip)
        // Keeps the connection busy without an answer: blank lines, never done.
        drip = setInterval(() => {
          if (state === 'open') controller.enqueue(encoder.encode('\n'));
        }, 5);
      // 'stall': nothing more, until the abort.
    },
    cancel() {
      stop();
      if (state === 'open') state = 'cancelled';
    },
  });
  return { stream, leftOpen: () => state === 'open' };
}

const turn = { sessionId: 'fuzz', turnNo: 1, generation: 1, contextRevision: 0, inputs: [] };

type Outcome = { text: string } | { code: string } | { threw: string };

async function run(
  c: StreamCase,
  via: 'read' | 'http',
  cutAt: 'every' | number[],
  shown: string[],
): Promise<{ outcome: Outcome; leftOpen: boolean }> {
  let leftOpen = () => false;
  const onText = (t: string) => shown.push(t);
  try {
    let answer: { text: string };
    if (via === 'read') {
      const w = wire(c, cutAt);
      leftOpen = w.leftOpen;
      answer = await readAgentStream(w.stream, c.format, { maxChars: MAX_REPLY_TEXT, onText });
    } else {
      const agent = httpAgent({
        url: 'http://agent.fuzz/',
        timeoutMs: c.ending === 'stall' || c.ending === 'drip' ? STALL_TIMEOUT_MS : CALM_TIMEOUT_MS,
        signingSecret: SECRET,
        fetch: async (_url, init) => {
          const w = wire(c, cutAt, init?.signal ?? undefined);
          leftOpen = w.leftOpen;
          return new Response(w.stream, {
            status: c.status ?? 200,
            headers: { 'content-type': c.contentType ?? 'application/x-ndjson' },
          });
        },
      });
      answer = await agent.reply(turn, new AbortController().signal, onText);
    }
    return { outcome: { text: answer.text }, leftOpen: leftOpen() };
  } catch (err) {
    const outcome =
      err instanceof AppError
        ? { code: err.code }
        : { threw: `${(err as Error)?.name}: ${String((err as Error)?.message).slice(0, 120)}` };
    return { outcome, leftOpen: leftOpen() };
  }
}

describe('fuzz: hostile agent streams', () => {
  it(
    'agent_stream.hostile: every hostile stream fails its generation with its stable code, nothing else is thrown, no text past the limit, no body left open',
    async ({ task }) => {
      const caseMs: number[] = [];
      const stats: GroupStats = {
        group: 'agent streams',
        cases: 0,
        s2xx: 0,
        s4xx: 0,
        s5xx: 0,
        other: 0,
        writesFromRejected: 0,
        secretsLeaked: 0,
        routes: {},
        answers: {},
        failures: [],
        timing: caseTiming([], 0),
      };
      // One property per kind, each its share of the cases: every kind is reached however small the run.
      const names = Object.keys(kinds);
      for (const kind of names)
        await fc.assert(
          fc.asyncProperty(streamCase(kind), async ({ case: c, via, cuts: cutAt }) => {
            const started = performance.now();
            const shown: string[] = [];
            const { outcome, leftOpen } = await run(c, via, cutAt, shown);
            caseMs.push(performance.now() - started);
            stats.cases++;
            const route = `${c.kind} ${c.format} ${via}`;
            stats.routes[route] = (stats.routes[route] ?? 0) + 1;
            const answer = 'text' in outcome ? 'answered' : 'code' in outcome ? outcome.code : 'threw';
            stats.answers[answer] = (stats.answers[answer] ?? 0) + 1;
            const problems: string[] = [];
            if ('threw' in outcome) problems.push(`threw ${outcome.threw}`);
            if ('text' in outcome && outcome.text.length > MAX_REPLY_TEXT)
              problems.push('returned text past the limit');
            if (shown.some((t) => t.length > MAX_REPLY_TEXT)) problems.push('showed text past the limit');
            if (JSON.stringify(outcome).includes(SECRET)) {
              stats.secretsLeaked++;
              problems.push('named the signing secret');
            }
            if (leftOpen) problems.push('left the body open');
            if (JSON.stringify(outcome) !== JSON.stringify(c.expect))
              problems.push(
                `${JSON.stringify(outcome).slice(0, 160)}, expected ${JSON.stringify(c.expect).slice(0, 80)}`,
              );
            if (problems.length === 0) {
              if ('text' in c.expect) stats.s2xx++;
              else stats.s4xx++;
            } else {
              stats.s5xx++;
              if (stats.failures.length < 10)
                stats.failures.push(
                  `${route} (${c.body.length} bytes, cuts ${JSON.stringify(cutAt)}): ${problems.join('; ')}`,
                );
            }
            // Thrown, so fast-check prints what was wrong beside the counterexample.
            if (problems.length > 0) throw new Error(problems.join('; '));
          }),
          fcParams(names.length),
        );
      stats.timing = caseTiming(caseMs, 0);
      task.meta.fuzz = stats;
      console.log(
        `fuzz agent streams: ${stats.cases} cases, ${stats.s2xx} valid answered, ${stats.s4xx} hostile failed with their code, ${stats.s5xx} wrong; ` +
          Object.entries(stats.answers)
            .map(([a, n]) => `${a} ×${n}`)
            .join(', ') +
          (stats.failures.length ? `\n  ${stats.failures.join('\n  ')}` : ''),
      );
      expect(stats.failures).toEqual([]);
      expect(stats.s5xx).toBe(0);
    },
    fuzzTimeout(),
  );
});
