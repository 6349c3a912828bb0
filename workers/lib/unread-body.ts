import type { MiddlewareHandler } from 'hono';

/**
 * An unread or abandoned request body is read to its end and dropped, up to this much (the
 * largest body Cloudflare's edge lets through on the smallest plan); beyond it, cancelled.
 */
export const DRAIN_MAX_BYTES = 100 * 1024 * 1024;
/** And for at most this long: a client that trickles its body does not hold the request. */
export const DRAIN_MAX_MS = 5000;

/**
 * Releases the request body when the answer is ready and nobody read it (an early 401/404/413,
 * a route that takes no body). Left unread, the runtime must skip those bytes to reach the
 * connection's next request, and under concurrent keep-alive load it does not always manage
 * (issue 16: 501 "Unrecognized request method" on 10-14% of such requests).
 *
 * Read to its end, never cancelled within the bounds (issue 29 hole 11): a body the Worker
 * started reading, or cancelled, makes workerd close that connection after the answer, and
 * the proxy `wrangler dev` puts in front of the Worker sends the next request over the closed
 * connection; whoever sent it gets 503 "Your worker restarted mid-request" (reproduction in
 * docs/security.md "Request bodies"). A body read to its end leaves the connection reusable.
 */
export function releaseUnreadBody(): MiddlewareHandler {
  return async function releaseUnreadBody(c, next) {
    const received = c.req.raw.body;
    try {
      await next();
    } finally {
      // The body as received, and the one a middleware put in its place (limitBody's counted
      // stream, which reads the received body). A locked body belongs to its reader: limitBody
      // drains what it stops reading.
      for (const body of new Set([received, c.req.raw.body]))
        if (body && !body.locked) await discardRest(body.getReader());
    }
  };
}

/**
 * Reads what is left of a body and drops it, within DRAIN_MAX_BYTES and DRAIN_MAX_MS; only a
 * body beyond those is cancelled (and its connection given up). Never throws.
 */
export async function discardRest(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
  const deadline = Date.now() + DRAIN_MAX_MS;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), DRAIN_MAX_MS);
  });
  try {
    for (let seen = 0; ; ) {
      const chunk = await Promise.race([reader.read(), late]);
      if (chunk === 'late') break;
      if (chunk.done) return;
      seen += chunk.value.byteLength;
      if (seen > DRAIN_MAX_BYTES || Date.now() > deadline) break;
    }
    await reader.cancel();
  } catch {
    // By design: the client went away or the stream errored; there is nothing left to release.
  } finally {
    clearTimeout(timer);
  }
}
