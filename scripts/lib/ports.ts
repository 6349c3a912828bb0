import { createServer } from 'node:net';

/**
 * The fixed ports of `npm run dev`: PORT (default 8787) for the service, PORT+1 for the Lark
 * emulator. Everything else (the WebSocket bridge, embedded Postgres, wrangler's inspector
 * and its internal sockets) takes a free port, so two stacks differ by PORT alone.
 */
export function devPorts(raw = process.env.PORT ?? '8787'): { service: number; emulator: number } {
  const service = Number(raw);
  if (!/^\d+$/.test(raw) || service < 1 || service > 65534)
    throw new Error(
      `PORT must be a port number from 1 to 65534 (the Lark emulator takes PORT+1), not "${raw}"`,
    );
  return { service, emulator: service + 1 };
}

/** The one line a taken port gets, instead of an EADDRINUSE stack. */
export function portTakenMessage(port: number, what: string): string {
  return `port ${port} is taken (${what}); set PORT=... to use another (the service takes PORT, the Lark emulator PORT+1)`;
}

/** Throws `portTakenMessage` unless `port` can be bound on 127.0.0.1 (released again at once). */
export async function ensurePortFree(port: number, what: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'EADDRINUSE' ? new Error(portTakenMessage(port, what)) : err),
    );
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve()));
  });
}

/** A port that was free on 127.0.0.1 a moment ago (for a process started right after). */
export async function freePort(): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}
