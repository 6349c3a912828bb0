import type { ErrorCode, Intent, MessageReactions, RetireResult, Ticket, WriteResult } from './api-types';
import type { Scheduler } from './scheduler';

/**
 * The four /v1 calls over an injected `fetch`, each with a timeout from the scheduler.
 * Every answer is one of: ok (a validated 2xx body), error (the server's one error shape
 * with a code to switch on), or unknown (network error, timeout, 5xx without a body, or a
 * body we cannot read): the request may or may not have taken effect.
 */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export type ApiResult<T> =
  | { kind: 'ok'; status: number; body: T }
  | {
      kind: 'error';
      status: number;
      code: ErrorCode;
      message: string;
      details: unknown;
      retryAfterMs: number | null;
    }
  | { kind: 'unknown'; reason: 'network' | 'timeout' | 'http_status' | 'bad_response'; status?: number }
  /** The session stopped (sign-out) before or while the request ran: nothing to learn from it. */
  | { kind: 'stopped' };

export interface TransportOptions {
  baseUrl: string;
  fetch: FetchLike;
  scheduler: Scheduler;
  requestTimeoutMs: number;
}

class TimeoutError extends Error {}
class StoppedError extends Error {}

function retryAfterMs(res: Response): number | null {
  const raw = res.headers.get('retry-after');
  if (!raw) return null;
  const seconds = Number(raw);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : null;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;

export class Transport {
  constructor(private readonly opts: TransportOptions) {}

  issue(token: string, operationId: string, intent: Intent, stop?: AbortSignal): Promise<ApiResult<Ticket>> {
    return this.call(
      'POST',
      '/v1/reaction-tickets',
      token,
      { operationId, ...intent },
      (b) => typeof b.ticket === 'string' && typeof b.expiresAt === 'string',
      stop,
    );
  }

  write(
    token: string,
    operationId: string,
    ticket: string,
    intent: Intent,
    stop?: AbortSignal,
  ): Promise<ApiResult<WriteResult>> {
    return this.call(
      'PUT',
      `/v1/reaction-operations/${encodeURIComponent(operationId)}`,
      token,
      { ticket, ...intent },
      (b) => isObject(b.receipt) && isObject(b.message),
      stop,
    );
  }

  retire(
    token: string,
    operationId: string,
    ticket: string,
    stop?: AbortSignal,
  ): Promise<ApiResult<RetireResult>> {
    return this.call(
      'POST',
      `/v1/reaction-operations/${encodeURIComponent(operationId)}/retire`,
      token,
      { ticket },
      (b) => b.status === 'retired' || b.status === 'applied',
      stop,
    );
  }

  reactions(token: string, messageId: string, stop?: AbortSignal): Promise<ApiResult<MessageReactions>> {
    return this.call(
      'GET',
      `/v1/messages/${encodeURIComponent(messageId)}/reactions`,
      token,
      undefined,
      (b) => Array.isArray(b.reactions),
      stop,
    );
  }

  private async call<T>(
    method: string,
    path: string,
    token: string,
    body: unknown,
    valid: (b: Record<string, unknown>) => boolean,
    stop?: AbortSignal,
  ): Promise<ApiResult<T>> {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const init: RequestInit = { method, headers };
    if (body !== undefined) init.body = JSON.stringify(body);
    let res: Response;
    let parsed: unknown;
    try {
      [res, parsed] = await this.withTimeout(stop, async (signal) => {
        const r = await this.opts.fetch(`${this.opts.baseUrl}${path}`, { ...init, signal });
        const text = await r.text();
        let json: unknown = null;
        try {
          json = text ? JSON.parse(text) : null;
        } catch {
          json = undefined;
        }
        return [r, json] as const;
      });
    } catch (err) {
      if (err instanceof StoppedError || stop?.aborted) return { kind: 'stopped' };
      return { kind: 'unknown', reason: err instanceof TimeoutError ? 'timeout' : 'network' };
    }
    if (res.ok) {
      return isObject(parsed) && valid(parsed)
        ? { kind: 'ok', status: res.status, body: parsed as T }
        : { kind: 'unknown', reason: 'bad_response', status: res.status };
    }
    const error = isObject(parsed) && isObject(parsed.error) ? parsed.error : null;
    if (!error || typeof error.code !== 'string')
      return { kind: 'unknown', reason: 'http_status', status: res.status };
    return {
      kind: 'error',
      status: res.status,
      code: error.code as ErrorCode,
      message: String(error.message ?? ''),
      details: error.details ?? null,
      retryAfterMs: retryAfterMs(res),
    };
  }

  /**
   * Aborts the request and stops waiting at the deadline, or as soon as `stop` (the
   * session's sign-out) fires, even if `fetch` ignores the signal. `stop` is checked right
   * before `fetch` is called, with no await in between: once it has fired, no request starts.
   */
  private withTimeout<R>(
    stop: AbortSignal | undefined,
    run: (signal: AbortSignal) => Promise<R>,
  ): Promise<R> {
    if (stop?.aborted) return Promise.reject(new StoppedError('signed out'));
    const controller = new AbortController();
    return new Promise<R>((resolve, reject) => {
      const onStop = () => {
        cancel();
        controller.abort();
        reject(new StoppedError('signed out'));
      };
      const cancel = this.opts.scheduler.at(this.opts.scheduler.now() + this.opts.requestTimeoutMs, () => {
        stop?.removeEventListener('abort', onStop);
        controller.abort();
        reject(new TimeoutError('request timed out'));
      });
      stop?.addEventListener('abort', onStop, { once: true });
      const settle = () => {
        cancel();
        stop?.removeEventListener('abort', onStop);
      };
      run(controller.signal).then(
        (v) => {
          settle();
          resolve(v);
        },
        (e) => {
          settle();
          reject(e);
        },
      );
    });
  }
}
