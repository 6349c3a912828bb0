import { readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { streamingAgent } from '../../../examples/agent/server';
import { AGENT_SCHEMA_FILE } from '../../../scripts/agent-schema';
import { httpAgent } from '../../../workers/agents';
import { agentContractSchema } from '../../../workers/agents/contract';

const SECRET = 'agent-signing-secret-0123456789abcdef';
const server = streamingAgent(SECRET);
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const turn = {
  sessionId: 'lark-conversation:li_x:oc_y:-',
  turnNo: 2,
  generation: 1,
  contextRevision: 0,
  inputs: [{ position: 3, messageId: 'om_a', senderOpenId: 'ou_1', text: 'xin chào bạn' }],
};

describe('the agent contract', () => {
  it('agent.schema_current: docs/agent-protocol.schema.json is what the code accepts (regenerate: npx tsx scripts/agent-schema.ts)', async () => {
    // Compared as JSON: the formatter may lay the committed file out its own way.
    expect(JSON.parse(await readFile(AGENT_SCHEMA_FILE, 'utf8'))).toEqual(agentContractSchema());
  });

  it('agent.example_streams: the example agent verifies the service request and streams an answer the service reads', async () => {
    const seen: string[] = [];
    const agent = httpAgent({ url, timeoutMs: 5000, signingSecret: SECRET });
    expect(await agent.reply(turn, new AbortController().signal, (t) => seen.push(t))).toEqual({
      text: 'echo: xin chào bạn',
    });
    expect(seen.at(-1)).toBe('echo: xin chào bạn');
    expect(seen.length).toBeGreaterThan(1);
    // Signed with another secret, the example agent refuses it: agent_failed, nothing read.
    const wrong = httpAgent({ url, timeoutMs: 5000, signingSecret: `${SECRET}-other` });
    await expect(wrong.reply(turn, new AbortController().signal)).rejects.toMatchObject({
      code: 'agent_failed',
    });
  });
});
