import { describe, expect, it } from 'vitest';
import { httpAgent } from '../../workers/agents';
import { readAgentStream, type StreamFormat } from '../../workers/agents/stream';

/**
 * Agent protocol v2 (workers/agents/stream.ts): an agent may answer with NDJSON or SSE events
 * (delta, status, done, error) instead of `{"text"}`. Each rule is pinned here, with the
 * stream cut into chunks that split lines and a multi-byte character.
 */
const encoder = new TextEncoder();

/** The text as a byte stream cut every `every` bytes (lines and characters split across reads). */
function chunked(text: string, every = 7): ReadableStream<Uint8Array> {
  const bytes = encoder.encode(text);
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= bytes.length) return controller.close();
      controller.enqueue(bytes.slice(at, at + every));
      at += every;
    },
  });
}

const ndjson = (...events: object[]) => `${events.map((e) => JSON.stringify(e)).join('\n')}\n`;
const sse = (...events: object[]) => events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('');
const read = (text: string, format: StreamFormat, maxChars = 100, onText?: (t: string) => void) =>
  readAgentStream(chunked(text), format, { maxChars, onText });

describe('agent protocol v2: event streams', () => {
  it('agent.stream_ndjson: deltas accumulate (reported as they come), status is not text, done is the answer', async () => {
    const seen: string[] = [];
    const reply = await read(
      ndjson(
        { type: 'status', status: 'thinking' },
        { type: 'delta', text: 'Xin ' },
        { type: 'delta', text: 'chào 👋' },
        { type: 'done', text: 'Xin chào 👋' },
      ),
      'ndjson',
      100,
      (t) => seen.push(t),
    );
    expect(reply).toEqual({ text: 'Xin chào 👋' });
    expect(seen).toEqual(['Xin ', 'Xin chào 👋']);
  });

  it('agent.stream_sse: data lines of Server-Sent Events, comments and other fields ignored, CRLF accepted', async () => {
    const body = `: keep-alive\r\nevent: message\r\n${sse({ type: 'delta', text: 'hi' }, { type: 'done', text: 'hi there' }).replaceAll('\n', '\r\n')}`;
    expect(await read(body, 'sse')).toEqual({ text: 'hi there' });
  });

  it('agent.stream_invalid: not JSON, an unknown event, text past the limit, an event after done, or no done fails with agent_stream_invalid', async () => {
    const cases = [
      `${ndjson({ type: 'delta', text: 'a' })}not json\n`,
      ndjson({ type: 'delta', text: 'a' }, { type: 'shout', text: 'b' }),
      ndjson({ type: 'delta', text: 'x'.repeat(60) }, { type: 'delta', text: 'y'.repeat(60) }),
      ndjson({ type: 'done', text: 'z'.repeat(101) }),
      ndjson({ type: 'done', text: 'ok' }, { type: 'delta', text: 'more' }),
      ndjson({ type: 'delta', text: 'never finished' }),
      // One line without a newline, longer than any event within the limit can be.
      `{"type":"delta","text":"${'q'.repeat(5000)}`,
    ];
    for (const body of cases)
      await expect(read(body, 'ndjson'), body.slice(0, 60)).rejects.toMatchObject({
        code: 'agent_stream_invalid',
      });
    await expect(
      read(sse({ type: 'done', text: 'ok' }, { type: 'delta', text: 'x' }), 'sse'),
    ).rejects.toMatchObject({
      code: 'agent_stream_invalid',
    });
  });

  it('agent.stream_error_event: an error event fails the generation as agent_failed, naming its code', async () => {
    await expect(
      read(ndjson({ type: 'delta', text: 'a' }, { type: 'error', code: 'overloaded' }), 'ndjson'),
    ).rejects.toMatchObject({ code: 'agent_failed', message: expect.stringContaining('overloaded') });
  });

  it('the HTTP agent reads a streamed answer by its content type, and a stream that stalls past the timeout is agent_timeout', async () => {
    const secret = 'agent-signing-secret-0123456789abcdef';
    const streaming = httpAgent({
      url: 'http://agent.test/',
      timeoutMs: 1000,
      signingSecret: secret,
      fetch: async () =>
        new Response(chunked(ndjson({ type: 'delta', text: 'he' }, { type: 'done', text: 'hello' })), {
          headers: { 'content-type': 'application/x-ndjson; charset=utf-8' },
        }),
    });
    const turn = { sessionId: 's', turnNo: 1, generation: 1, contextRevision: 0, inputs: [] };
    expect(await streaming.reply(turn, new AbortController().signal)).toEqual({ text: 'hello' });
    const stalled = httpAgent({
      url: 'http://agent.test/',
      timeoutMs: 50,
      signingSecret: secret,
      fetch: async (_u, init) =>
        new Response(
          new ReadableStream({
            start(controller) {
              controller.enqueue(encoder.encode(ndjson({ type: 'delta', text: 'he' })));
              init?.signal?.addEventListener('abort', () => controller.error(init.signal!.reason));
            },
          }),
          { headers: { 'content-type': 'application/x-ndjson' } },
        ),
    });
    await expect(stalled.reply(turn, new AbortController().signal)).rejects.toMatchObject({
      code: 'agent_timeout',
    });
  });
});
