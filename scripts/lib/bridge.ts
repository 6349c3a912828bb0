import { connect } from 'node:net';
import { WebSocketServer } from 'ws';

/**
 * The WebSocket-to-TCP bridge the Neon driver needs in front of a plain Postgres (Neon's
 * own proxy plays this role in production). The driver connects to
 * `ws://<bridge>/v2?address=host:port`; only loopback targets are allowed.
 */
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);

export interface Bridge {
  port: number;
  close(): Promise<void>;
}

/** Sees every chunk of one connection as it passes (the bench counts protocol messages). */
export interface FrameTap {
  /** A chunk from the driver, before it goes to Postgres. */
  client?(data: Buffer): void;
  /** A chunk from Postgres, before it goes to the driver. */
  server?(data: Buffer): void;
}

export interface BridgeOptions {
  /** Called once per accepted connection; the tap it returns sees that connection's chunks. */
  onConnection?: () => FrameTap;
}

export async function startBridge(port = 0, host = '127.0.0.1', opts: BridgeOptions = {}): Promise<Bridge> {
  const wss = new WebSocketServer({ port, host });
  await new Promise<void>((resolve, reject) => {
    wss.once('listening', resolve);
    wss.once('error', reject);
  });
  wss.on('connection', (socket, req) => {
    const address = new URL(req.url ?? '/', 'http://bridge').searchParams.get('address') ?? '';
    const sep = address.lastIndexOf(':');
    const targetHost = address.slice(0, sep);
    const targetPort = Number(address.slice(sep + 1));
    if (!LOOPBACK.has(targetHost) || !Number.isInteger(targetPort)) {
      socket.close(1008, 'loopback targets only');
      return;
    }
    const tap = opts.onConnection?.() ?? {};
    const tcp = connect(targetPort, targetHost.replace(/^\[|\]$/g, ''));
    tcp.setNoDelay(true);
    const pending: Buffer[] = [];
    let open = false;
    tcp.on('connect', () => {
      open = true;
      for (const chunk of pending.splice(0)) tcp.write(chunk);
    });
    socket.on('message', (data: Buffer) => {
      tap.client?.(data);
      if (open) tcp.write(data);
      else pending.push(data);
    });
    tcp.on('data', (chunk) => {
      tap.server?.(chunk);
      if (socket.readyState === socket.OPEN) socket.send(chunk);
    });
    const closeBoth = () => {
      tcp.destroy();
      if (socket.readyState === socket.OPEN) socket.close();
    };
    tcp.on('error', closeBoth);
    tcp.on('close', closeBoth);
    socket.on('close', closeBoth);
    socket.on('error', closeBoth);
  });
  const actual = (wss.address() as { port: number }).port;
  return {
    port: actual,
    close: () =>
      new Promise((resolve) => {
        for (const c of wss.clients) c.terminate();
        wss.close(() => resolve());
      }),
  };
}
