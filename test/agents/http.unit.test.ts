import { createHmac, timingSafeEqual } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { AGENT_BINDING_URL, agentFor, echoAgent, httpAgent, typingEchoAgent } from '../../workers/agents';
import { type Env, loadConfig } from '../../workers/env';

const SECRET = 'agent-signing-secret-0123456789abcdef';

/**
 * The verification docs/channel.md gives agents, written with node:crypto (not the code under
 * test): HMAC-SHA256 over `<timestamp>.<raw body>`, compared in constant time, and a timestamp
 * within five minutes of the agent's clock.
 */
function verify(headers: Headers, rawBody: string, secret: string, nowSeconds = Date.now() / 1000): boolean {
  const timestamp = headers.get('x-agent-timestamp') ?? '';
  const given = headers.get('x-agent-signature') ?? '';
  if (!/^\d+$/.test(timestamp) || Math.abs(nowSeconds - Number(timestamp)) > 300) return false;
  const expected = `v1=${createHmac('sha256', secret).update(`${timestamp}.${rawBody}`).digest('hex')}`;
  return given.length === expected.length && timingSafeEqual(Buffer.from(given), Buffer.from(expected));
}

const turn = {
  sessionId: 'lark-conversation:li_x:oc_y:-',
  turnNo: 4,
  generation: 2,
  contextRevision: 1,
  inputs: [
    { position: 7, messageId: 'om_a', senderOpenId: 'ou_1', text: 'hi' },
    { position: 8, messageId: 'om_b', senderOpenId: 'ou_1', text: 'there' },
  ],
};

describe('agents', () => {
  it('the HTTP agent posts the whole turn and returns its text', async () => {
    let sent: { url: string; body: unknown } | null = null;
    const agent = httpAgent({
      url: 'http://agent.test/reply',
      timeoutMs: 1000,
      signingSecret: SECRET,
      fetch: async (url, init) => {
        sent = { url: String(url), body: JSON.parse(String(init?.body)) };
        return Response.json({ text: 'hello back' });
      },
    });
    expect(await agent.reply(turn, new AbortController().signal)).toEqual({ text: 'hello back' });
    expect(sent).toEqual({
      url: 'http://agent.test/reply',
      body: {
        session_id: turn.sessionId,
        turn: 4,
        generation: 2,
        context_revision: 1,
        inputs: [
          { position: 7, message_id: 'om_a', sender_open_id: 'ou_1', text: 'hi' },
          { position: 8, message_id: 'om_b', sender_open_id: 'ou_1', text: 'there' },
        ],
      },
    });
  });

  it('the HTTP agent times out on its own budget and rejects malformed or failed answers', async () => {
    const hang = httpAgent({
      url: 'http://agent.test/',
      timeoutMs: 30,
      signingSecret: SECRET,
      fetch: (_u, init) =>
        new Promise((_r, reject) =>
          init?.signal?.addEventListener('abort', () => reject(init.signal!.reason)),
        ),
    });
    await expect(hang.reply(turn, new AbortController().signal)).rejects.toMatchObject({
      code: 'agent_timeout',
    });
    const bad = httpAgent({
      url: 'http://agent.test/',
      timeoutMs: 1000,
      signingSecret: SECRET,
      fetch: async () => Response.json({ nope: 1 }),
    });
    await expect(bad.reply(turn, new AbortController().signal)).rejects.toMatchObject({
      code: 'agent_failed',
    });
    const down = httpAgent({
      url: 'http://agent.test/',
      timeoutMs: 1000,
      signingSecret: SECRET,
      fetch: async () => new Response('oops', { status: 503 }),
    });
    await expect(down.reply(turn, new AbortController().signal)).rejects.toMatchObject({
      code: 'agent_failed',
    });
  });

  it('agent.signed_requests: every request carries a signature over its timestamp and exact body, and the idempotency key of its generation', async () => {
    const seen: { headers: Headers; body: string }[] = [];
    const agent = httpAgent({
      url: 'http://agent.test/reply',
      timeoutMs: 1000,
      signingSecret: SECRET,
      fetch: async (_u, init) => {
        seen.push({ headers: new Headers(init?.headers), body: String(init?.body) });
        return Response.json({ text: 'ok' });
      },
    });
    await agent.reply(turn, new AbortController().signal);
    await agent.reply({ ...turn, generation: 3 }, new AbortController().signal);
    for (const { headers, body } of seen) {
      expect(verify(headers, body, SECRET)).toBe(true);
      // Another secret, a changed body, or a replay from ten minutes ago does not verify.
      expect(verify(headers, body, `${SECRET}x`)).toBe(false);
      expect(verify(headers, body.replace('hi', 'hI'), SECRET)).toBe(false);
      expect(verify(headers, body, SECRET, Date.now() / 1000 + 600)).toBe(false);
    }
    expect(seen.map((r) => r.headers.get('x-agent-protocol'))).toEqual(['2', '2']);
    expect(seen.map((r) => r.headers.get('idempotency-key'))).toEqual([
      `${turn.sessionId}:4:2`,
      `${turn.sessionId}:4:3`,
    ]);
  });

  it('agent.secret_required: AGENT_URL without AGENT_SIGNING_SECRET is a refused configuration, never unsigned requests', () => {
    const base = {
      DATABASE_URL: 'postgres://u:p@127.0.0.1:5432/d',
      ADMIN_TOKEN: 'admin-token-0123456789abcdef',
      SECRET_KEYS: JSON.stringify({ '1': 'MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=' }),
      AGENT_URL: 'https://agent.example.test/reply',
    };
    expect(() => loadConfig(base as unknown as Env)).toThrow(/AGENT_SIGNING_SECRET/);
    expect(loadConfig({ ...base, AGENT_SIGNING_SECRET: SECRET } as unknown as Env).AGENT_SIGNING_SECRET).toBe(
      SECRET,
    );
  });

  it('agent.service_binding: with an AGENT service binding the turn goes to that Worker, signed as over HTTP, ahead of AGENT_URL; without the secret it is refused', async () => {
    const seen: { url: string; headers: Headers; body: string }[] = [];
    const binding = {
      fetch: async (input: RequestInfo | URL, init?: RequestInit) => {
        seen.push({ url: String(input), headers: new Headers(init?.headers), body: String(init?.body) });
        return Response.json({ text: 'from the bound agent' });
      },
    } as unknown as Fetcher;
    const config = {
      AGENT_URL: 'https://agent.example.test/',
      AGENT_TIMEOUT_MS: 1000,
      AGENT_SIGNING_SECRET: SECRET,
    };
    expect(await agentFor(config, binding).reply(turn, new AbortController().signal)).toEqual({
      text: 'from the bound agent',
    });
    expect(seen.map((r) => r.url)).toEqual([AGENT_BINDING_URL]);
    expect(verify(seen[0]!.headers, seen[0]!.body, SECRET)).toBe(true);
    expect(() => agentFor({ AGENT_TIMEOUT_MS: 1000 }, binding)).toThrow(/AGENT_SIGNING_SECRET/);
    // Without a binding, AGENT_URL as before; with neither, the echo agent.
    expect(agentFor(config).name).toBe('http');
    expect(agentFor({ AGENT_TIMEOUT_MS: 1000 })).toBe(echoAgent);
  });

  it('the echo agent answers with every coalesced input', async () => {
    expect(await echoAgent.reply(turn, new AbortController().signal)).toEqual({
      text: 'echo (2): hi | there',
    });
  });

  it('agent.echo_fails_on_demand: with ECHO_AGENT_FAIL_MARKER a turn carrying the marker fails, its re-run and other turns answer', async () => {
    const config = { AGENT_TIMEOUT_MS: 1000, ECHO_AGENT_FAIL_MARKER: '/fail' };
    const agent = agentFor(config);
    expect(agent.name).toBe('echo');
    const signal = new AbortController().signal;
    const marked = { ...turn, inputs: [...turn.inputs, { ...turn.inputs[0]!, text: 'please /fail' }] };
    await expect(agent.reply(marked, signal)).rejects.toThrow(/failing on demand \(\/fail\)/);
    expect(await agent.reply({ ...marked, rerunOf: 1 }, signal)).toEqual({
      text: 'echo (3): hi | there | please /fail',
    });
    expect(await agent.reply(turn, signal)).toEqual({ text: 'echo (2): hi | there' });
    // Unset, the marker is text like any other.
    expect(await agentFor({ AGENT_TIMEOUT_MS: 1000 }).reply(marked, signal)).toEqual({
      text: 'echo (3): hi | there | please /fail',
    });
  });

  it('agent.echo_types_out: with ECHO_AGENT_WORD_MS the echo agent streams its answer word by word to a watcher, answers a text reply at once, and stops on abort', async () => {
    expect(agentFor({ AGENT_TIMEOUT_MS: 1000, ECHO_AGENT_WORD_MS: 100 }).name).toBe('echo');
    expect(agentFor({ AGENT_TIMEOUT_MS: 1000, ECHO_AGENT_WORD_MS: 100 })).not.toBe(echoAgent);
    const agent = typingEchoAgent(100);
    // A text reply has no watcher: the same answer as the plain echo agent, without waiting.
    expect(await agent.reply(turn, new AbortController().signal)).toEqual({ text: 'echo (2): hi | there' });
    vi.useFakeTimers();
    try {
      const seen: string[] = [];
      const answer = agent.reply(turn, new AbortController().signal, (t) => seen.push(t));
      // The first word at once, then one more each 100 ms: the text so far, never a delta.
      expect(seen).toEqual(['echo ']);
      await vi.advanceTimersByTimeAsync(99);
      expect(seen).toEqual(['echo ']);
      await vi.advanceTimersByTimeAsync(1);
      expect(seen).toEqual(['echo ', 'echo (2): ']);
      await vi.advanceTimersByTimeAsync(300);
      expect(await answer).toEqual({ text: 'echo (2): hi | there' });
      expect(seen).toEqual([
        'echo ',
        'echo (2): ',
        'echo (2): hi ',
        'echo (2): hi | ',
        'echo (2): hi | there',
      ]);
      // Aborted mid-answer (the agent's timeout): it rejects with the reason and reports no more.
      const abort = new AbortController();
      const stopped: string[] = [];
      const cut = agent.reply(turn, abort.signal, (t) => stopped.push(t));
      const outcome = cut.catch((e: unknown) => e);
      await vi.advanceTimersByTimeAsync(100);
      abort.abort(new Error('agent timeout'));
      await vi.advanceTimersByTimeAsync(1000);
      const settled = await Promise.race([outcome, Promise.resolve('still running')]);
      expect((settled as Error).message).toBe('agent timeout');
      expect(stopped).toEqual(['echo ', 'echo (2): ']);
    } finally {
      vi.useRealTimers();
    }
  });
});
