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
  /** Drops every open connection at once, both ends, mid-statement or not (the chaos run's fault). */
  cutAll(): number;
  close(): Promise<void>;
}

/** One accepted connection, for a tap that decides to drop it (chaos/db-faults.ts). */
export interface BridgeConnection {
  /** Drops the connection at once, both ends: nothing more passes either way. */
  cut(): void;
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
  onConnection?: (conn: BridgeConnection) => FrameTap;
}

export async function startBridge(port = 0, host = '127.0.0.1', opts: BridgeOptions = {}): Promise<Bridge> {
  const wss = new WebSocketServer({ port, host });
  await new Promise<void>((resolve, reject) => {
    wss.once('listening', resolve);
    wss.once('error', reject);
  });
  const live = new Set<() => void>();
  wss.on('connection', (socket, req) => {
    const address = new URL(req.url ?? '/', 'http://bridge').searchParams.get('address') ?? '';
    const sep = address.lastIndexOf(':');
    const targetHost = address.slice(0, sep);
    const targetPort = Number(address.slice(sep + 1));
    if (!LOOPBACK.has(targetHost) || !Number.isInteger(targetPort)) {
      socket.close(1008, 'loopback targets only');
      return;
    }
    let cut = false;
    const tap = opts.onConnection?.({ cut: () => cutNow() }) ?? {};
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
      // A tap may have cut the connection on this very chunk: it must not reach Postgres.
      if (cut) return;
      if (open) tcp.write(data);
      else pending.push(data);
    });
    tcp.on('data', (chunk) => {
      tap.server?.(chunk);
      if (!cut && socket.readyState === socket.OPEN) socket.send(chunk);
    });
    const closeBoth = () => {
      live.delete(cutNow);
      tcp.destroy();
      if (socket.readyState === socket.OPEN) socket.close();
    };
    // A cut says goodbye to neither end: no close frame, no Terminate message.
    function cutNow() {
      cut = true;
      live.delete(cutNow);
      tcp.destroy();
      socket.terminate();
    }
    live.add(cutNow);
    tcp.on('error', closeBoth);
    tcp.on('close', closeBoth);
    socket.on('close', closeBoth);
    socket.on('error', closeBoth);
  });
  const actual = (wss.address() as { port: number }).port;
  return {
    port: actual,
    cutAll: () => {
      const all = [...live];
      for (const closeOne of all) closeOne();
      return all.length;
    },
    close: () =>
      new Promise((resolve) => {
        for (const c of wss.clients) c.terminate();
        wss.close(() => resolve());
      }),
  };
}
