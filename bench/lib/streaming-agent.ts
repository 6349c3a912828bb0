import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { verified } from '../../examples/agent/server';

/** What the agent did for one turn's first generation, on this process's clock (Date.now()). */
export interface AgentTurnLog {
  anchor: string;
  /** When the first delta was written to the response. */
  firstChunkAt: number;
  /** When the `done` event was written. */
  doneAt: number;
  text: string;
}

export interface BenchAgent {
  url: string;
  /** By anchor message id (the turn's last input): its first generation only. */
  turns: Map<string, AgentTurnLog>;
  /** Requests after the first for a turn (replacement generations): 0 in a healthy run. */
  replacements: number;
  /** Requests whose signature did not verify (answered 401): 0 unless the stack is misconfigured. */
  refused: number;
  close(): Promise<void>;
}

/**
 * The bench's streaming agent (protocol v2, NDJSON): verifies each request's signature with the
 * documented check (examples/agent/server.ts), sends its headers at once, "thinks" `thinkMs`,
 * then streams `deltas` words `deltaMs` apart and ends with `done`, recording when it wrote its
 * first delta and its `done`. It answers a text reply the same way (the service reads the
 * stream and posts the `done` text), so both reply modes meet the same agent.
 */
export async function startStreamingAgent(opts: {
  secret: string;
  deltas: number;
  deltaMs: number;
  thinkMs: number;
}): Promise<BenchAgent> {
  const turns = new Map<string, AgentTurnLog>();
  const state = { replacements: 0, refused: 0 };
  const server = createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      raw += chunk;
    });
    req.on('end', async () => {
      if (!verified(req.headers, raw, opts.secret)) {
        state.refused++;
        res.writeHead(401).end();
        return;
      }
      const turn = JSON.parse(raw) as { inputs: { message_id: string }[] };
      const anchor = turn.inputs.at(-1)!.message_id;
      const first = !turns.has(anchor);
      if (!first) state.replacements++;
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.flushHeaders();
      await sleep(opts.thinkMs);
      const words = Array.from({ length: opts.deltas }, (_, i) => `word${i + 1} `);
      const log: AgentTurnLog = { anchor, firstChunkAt: 0, doneAt: 0, text: words.join('').trimEnd() };
      for (const [i, word] of words.entries()) {
        if (i > 0) await sleep(opts.deltaMs);
        res.write(`${JSON.stringify({ type: 'delta', text: word })}\n`);
        if (i === 0) log.firstChunkAt = Date.now();
      }
      res.end(`${JSON.stringify({ type: 'done', text: log.text })}\n`);
      log.doneAt = Date.now();
      if (first) turns.set(anchor, log);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    turns,
    get replacements() {
      return state.replacements;
    },
    get refused() {
      return state.refused;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
