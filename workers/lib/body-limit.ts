import type { MiddlewareHandler } from 'hono';
import { AppError } from '../errors';

const tooLarge = (maxBytes: number) => new AppError('payload_too_large', `Body over ${maxBytes} bytes`);

/**
 * The one size bound for request bodies (webhook, /v1, /admin): 413 `payload_too_large`.
 * - A declared Content-Length over the limit is refused before anything is read (the unread
 *   body is then cancelled by `releaseUnreadBody`).
 * - A body without one (chunked) is counted as the handler reads it, so nothing is read before
 *   the route's own checks (authentication) run; crossing the limit cancels the rest and the
 *   answer is 413 whatever the handler made of the truncated read.
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
    let seen = 0;
    let exceeded = false;
    const counted = raw.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, ctl) {
          seen += chunk.byteLength;
          if (seen <= maxBytes) return ctl.enqueue(chunk);
          exceeded = true;
          // Errors the read and, through pipeThrough, cancels the rest of the request body.
          ctl.error(tooLarge(maxBytes));
        },
      }),
    );
    c.req.raw = new Request(raw, { body: counted });
    await next();
    if (exceeded) throw tooLarge(maxBytes);
  };
}
