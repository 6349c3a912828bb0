import type { AddressInfo } from 'node:net';
import { streamingAgent } from '../examples/agent/server';

/** AGENT_SIGNING_SECRET of every chaos runtime and its agent (throwaway, at least 32 characters). */
export const AGENT_SECRET = 'chaos-agent-signing-secret-0123456789abcdef';
/**
 * Between two deltas: a three-word answer streams for about half a second, so a card is
 * created on the first word, pushed at least once (the push interval is 250 ms) and finished
 * after the last; a restart with a CardKit call in flight lands mid-stream.
 */
const DELTA_DELAY_MS = 120;

export interface ChaosAgent {
  url: string;
  close(): Promise<void>;
}

/**
 * The chaos world's agent: examples/agent/server.ts, the signed streaming agent (NDJSON deltas
 * then `done`, the echo of the turn's inputs), on a free port of this host. Every runtime of the
 * schedule asks it (AGENT_URL), in text mode and card mode alike. A runtime disposed mid-answer
 * closes the connection under it: the write to a closed socket is the request's, never the
 * process's error.
 */
export async function startChaosAgent(): Promise<ChaosAgent> {
  const server = streamingAgent(AGENT_SECRET, { delayMs: DELTA_DELAY_MS });
  // By design: a request whose runtime went away (a restart) has nobody left to answer.
  server.on('request', (req, res) => {
    req.on('error', () => undefined);
    res.on('error', () => undefined);
  });
  server.on('clientError', (_err, socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
