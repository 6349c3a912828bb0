import { describe, expect, it } from 'vitest';
import { echoAgent, httpAgent } from '../../workers/agents';

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
      fetch: async () => Response.json({ nope: 1 }),
    });
    await expect(bad.reply(turn, new AbortController().signal)).rejects.toMatchObject({
      code: 'agent_failed',
    });
    const down = httpAgent({
      url: 'http://agent.test/',
      timeoutMs: 1000,
      fetch: async () => new Response('oops', { status: 503 }),
    });
    await expect(down.reply(turn, new AbortController().signal)).rejects.toMatchObject({
      code: 'agent_failed',
    });
  });

  it('the echo agent answers with every coalesced input', async () => {
    expect(await echoAgent.reply(turn, new AbortController().signal)).toEqual({
      text: 'echo (2): hi | there',
    });
  });
});
