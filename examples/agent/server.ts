/**
 * A small streaming agent (docs/channel.md "Agents"): `npx tsx examples/agent/server.ts`, then
 * run the service with AGENT_URL=http://127.0.0.1:8790/ and the same AGENT_SIGNING_SECRET.
 * It refuses a request whose signature does not verify (401), then streams its echo of the
 * turn's inputs word by word as NDJSON deltas and ends with `done`. A real agent calls its
 * model where this one splits words; the framing and the checks stay the same.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';

/** The verification of docs/channel.md "Agent requests are signed". */
export function verified(
  headers: IncomingHttpHeaders,
  rawBody: string,
  secret: string,
  now = Date.now() / 1000,
) {
  const ts = String(headers['x-agent-timestamp'] ?? '');
  const given = String(headers['x-agent-signature'] ?? '');
  if (!/^\d+$/.test(ts) || Math.abs(now - Number(ts)) > 300) return false;
  const expected = `v1=${createHmac('sha256', secret).update(`${ts}.${rawBody}`).digest('hex')}`;
  return given.length === expected.length && timingSafeEqual(Buffer.from(given), Buffer.from(expected));
}

export function streamingAgent(secret: string, opts: { delayMs?: number } = {}): Server {
  return createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      raw += chunk;
    });
    req.on('end', async () => {
      if (!verified(req.headers, raw, secret)) {
        res.writeHead(401).end();
        return;
      }
      const turn = JSON.parse(raw) as { inputs: { text: string }[] };
      const text = `echo: ${turn.inputs.map((i) => i.text).join(' / ')}`;
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(`${JSON.stringify({ type: 'status', status: 'thinking' })}\n`);
      for (const word of text.split(/(?<= )/)) {
        res.write(`${JSON.stringify({ type: 'delta', text: word })}\n`);
        if (opts.delayMs) await new Promise((r) => setTimeout(r, opts.delayMs));
      }
      res.end(`${JSON.stringify({ type: 'done', text })}\n`);
    });
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const secret = process.env.AGENT_SIGNING_SECRET;
  if (!secret || secret.length < 32) {
    console.error('set AGENT_SIGNING_SECRET (at least 32 characters), the same as the service');
    process.exit(1);
  }
  const port = Number(process.env.PORT ?? 8790);
  streamingAgent(secret, { delayMs: 80 }).listen(port, '127.0.0.1', () =>
    console.log(`streaming agent on http://127.0.0.1:${port}/`),
  );
}
