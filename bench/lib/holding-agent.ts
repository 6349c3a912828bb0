import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The HTTP agent of the crash and deploy benches (52, 54): answers every turn at once, except
 * generation 1 while `holdFirst` is on, which it holds (never answered until `releaseHeld()`:
 * the runtime that asked is gone by then) and reports through `firstCallSeen`.
 */
export async function startHoldingAgent() {
  const agent = {
    holdFirst: true,
    firstCallSeen: undefined as (() => void) | undefined,
    url: '',
    /** Answers the held calls (their callers died with their runtime: nothing reads them). */
    releaseHeld: () => {
      for (const answer of held.splice(0)) answer();
    },
    close: () => server.close(),
  };
  const held: (() => void)[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      const turn = JSON.parse(body) as { generation: number };
      const answer = () => {
        if (res.destroyed) return;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ text: `reply to generation ${turn.generation}` }));
      };
      if (turn.generation === 1 && agent.holdFirst) {
        agent.firstCallSeen?.();
        held.push(answer);
      } else answer();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  agent.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  return agent;
}
