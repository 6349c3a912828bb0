import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * `npm run dev`'s stand-in for ALERT_WEBHOOK_URL: a webhook receiver on 127.0.0.1 that prints
 * each notification the alerts Tail Worker POSTs (Slack or Lark JSON) as one `[alert]` line.
 */
export async function startAlertReceiver(print: (line: string) => void) {
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      // Bounded: a notification is at most a few kB (workers/alerts/format.ts).
      if (body.length < 64 * 1024) body += chunk;
    });
    req.on('end', () => {
      let text = body;
      try {
        const parsed = JSON.parse(body) as { text?: string; content?: { text?: string } };
        text = parsed.text ?? parsed.content?.text ?? body;
      } catch {
        // Not JSON: printed as it came.
      }
      print(text.replaceAll('\n', ' | '));
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/alerts`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
