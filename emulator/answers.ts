/** The shapes of the emulator's Open API answers: success, Lark errors, rate limits. */

export interface ApiAnswer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

export const ok = (data: unknown, msg = 'success'): ApiAnswer => ({
  status: 200,
  body: { code: 0, msg, data },
});

export function larkError(status: number, code: number, msg: string): ApiAnswer {
  return {
    status,
    body: {
      code,
      msg,
      error: { log_id: `emu${Date.now().toString(16)}`, troubleshooter: 'https://open.larksuite.com/search' },
    },
  };
}

/** HTTP 429, 99991400, with the reset Lark sends (`x-ogw-ratelimit-reset`, seconds). */
export function tooMany(resetSeconds: number, limit = 50): ApiAnswer {
  const a = larkError(429, 99991400, 'request trigger frequency limit');
  a.headers = { 'x-ogw-ratelimit-limit': String(limit), 'x-ogw-ratelimit-reset': String(resetSeconds) };
  return a;
}
