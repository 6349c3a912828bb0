/**
 * The runtime's WebSocket, with `send` a no-op once the socket is closing or closed.
 *
 * Why: in workerd the Neon driver coalesces writes in a `setTimeout(0)` (`coalesceWrites`, on
 * by default), and pg closes the socket synchronously right after queuing its last message
 * (`end()` queues Terminate, then closes; a connection the server cut is closed under a queued
 * query). The queued `send` then throws "Can't call WebSocket send() after close()" inside the
 * timer, where nothing can catch it: workerd reports an uncaught exception for the request or
 * alarm, which an operator sees as an error. Those bytes are for a connection that is gone, and
 * pg has already seen its close, so dropping them loses nothing. Only a closing or closed
 * socket drops: one still connecting keeps the runtime's own behaviour.
 */
export function sendSafeWebSocket(Base: typeof WebSocket): typeof WebSocket {
  return class SendSafeWebSocket extends Base {
    override send(data: string | ArrayBuffer | ArrayBufferView): void {
      if (this.readyState === Base.CLOSING || this.readyState === Base.CLOSED) return;
      super.send(data);
    }
  };
}
