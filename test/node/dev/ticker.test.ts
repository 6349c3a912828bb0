import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, expect, it } from 'vitest';
import { fireStartupPasses } from '../../../scripts/lib/ticker';

/**
 * A restarted `npm run dev` runs the minute passes once at start (scripts/dev.ts): workerd does
 * not fire a Durable Object alarm that came due while it was down, so a debounce owed by the
 * previous run would wait for the next minute (issue 31 item 4; the crash bench's debounce
 * kill point: 50 s after the restart without it, 1.8 s with it).
 */
const hits: string[] = [];
const server = createServer((req, res) => {
  hits.push(req.url ?? '');
  res.end('ok');
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
afterAll(() => new Promise<void>((r) => server.close(() => r())));

it('dev.startup_passes: the minute cron of each Worker fires once at start, the hourly one waits for its hour', async () => {
  const lines: string[] = [];
  await fireStartupPasses(
    [
      { baseUrl: base, crons: ['* * * * *'] },
      { baseUrl: `${base}/retention`, crons: ['0 * * * *'] },
    ],
    (l) => lines.push(l),
  );
  expect(hits).toEqual(['/cdn-cgi/handler/scheduled?cron=*+*+*+*+*']);
  expect(lines).toEqual([]);
});
