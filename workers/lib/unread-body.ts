import type { MiddlewareHandler } from 'hono';

/** Up to this much of an unread body is read and dropped; a larger one is cancelled. */
export const DRAIN_MAX_BYTES = 256 * 1024;
/** And for at most this long: a client that trickles its body does not hold the request. */
export const DRAIN_MAX_MS = 2000;

/**
 * Releases the request body when the answer is ready and nobody read it (an early 401/404/413,
 * a route that takes no body). Left unread, the runtime must skip those bytes to reach the
 * connection's next request, and under concurrent keep-alive load it does not always manage:
 * the issue saw 501 "Unrecognized request method" on 10-14% of such requests, and
 * bench/probes/unread-body.ts measured 36 of 300 early 401s with a chunked 1 KiB body answered
 * 503 "Your worker restarted mid-request" by `wrangler dev`. Cancelling did not help there
 * (still 36 of 300); reading the rest did (0 of 300). So: drain a bounded amount, then cancel
 * (an over-size or endless body is not worth the connection).
 */
export function releaseUnreadBody(): MiddlewareHandler {
  return async function releaseUnreadBody(c, next) {
    const received = c.req.raw.body;
    try {
      await next();
    } finally {
      // The body as received, and the one a middleware put in its place (limitBody's counting
      // stream, which reads the received body through its pipe). A locked body belongs to its
      // reader: limitBody cancels what it stops reading.
      for (const body of new Set([received, c.req.raw.body]))
        if (body && !body.locked) await drainOrCancel(body);
    }
  };
}

async function drainOrCancel(body: ReadableStream<Uint8Array>): Promise<void> {
  const reader = body.getReader();
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
