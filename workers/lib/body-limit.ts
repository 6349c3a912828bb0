import type { MiddlewareHandler } from 'hono';
import { AppError } from '../errors';
import { discardRest } from './unread-body';

const tooLarge = (maxBytes: number) => new AppError('payload_too_large', `Body over ${maxBytes} bytes`);

/**
 * The one size bound for request bodies (webhook, /v1, /admin): 413 `payload_too_large`.
 * - A declared Content-Length over the limit is refused before anything is read (the unread
 *   body is then read to its end and dropped by `releaseUnreadBody`).
 * - A body without one (chunked) is counted as the handler reads it, so nothing is read before
 *   the route's own checks (authentication) run; crossing the limit fails the handler's read
 *   at once and the answer is 413 whatever the handler made of the truncated read.
 * The received body is never cancelled here: what the handler did not read is read to its end
 * and dropped (`discardRest`, bounded), because a body cancelled or abandoned part-way makes
 * the runtime close the connection, and the next request sent over it fails (issue 29 hole 11,
 * docs/security.md "Request bodies").
 */
export function limitBody(maxBytes: number): MiddlewareHandler {
  return async function limitBody(c, next) {
    const raw = c.req.raw;
    if (!raw.body) return next();
    const declared = raw.headers.get('content-length');
    if (declared !== null && !raw.headers.has('transfer-encoding')) {
      if (!/^\d+$/.test(declared) || Number(declared) > maxBytes) throw tooLarge(maxBytes);
      return next();
    }
    const source = raw.body.getReader();
    let seen = 0;
    let exceeded = false;
    let finished = false;
    // The read in flight, if any: workerd's request body allows one pending read at a time.
    let reading: Promise<unknown> | undefined;
    const counted = new ReadableStream<Uint8Array>(
      {
        async pull(ctl) {
          const read = source.read();
          reading = read;
          const chunk = await read;
          if (chunk.done) {
            finished = true;
            return ctl.close();
          }
          seen += chunk.value.byteLength;
          if (seen <= maxBytes) return ctl.enqueue(chunk.value);
          exceeded = true;
          // Fails the handler's read; the rest of the received body is dropped below.
          ctl.error(tooLarge(maxBytes));
        },
        // The handler gave up on the body (cancelled its stream): the rest is dropped below.
        cancel() {},
      },
      // Read only when the handler reads: nothing before the route's own checks ran.
      { highWaterMark: 0 },
    );
    c.req.raw = new Request(raw, { body: counted });
    try {
      await next();
    } finally {
      // By design: a failed read is the stream's end; discardRest has nothing to release then.
      await reading?.catch(() => undefined);
      if (!finished) await discardRest(source);
    }
    if (exceeded) throw tooLarge(maxBytes);
  };
}
