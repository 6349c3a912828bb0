import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { devPorts, ensurePortFree } from '../../../scripts/lib/ports';
import { envFileText } from '../../../scripts/lib/wrangler-dev';

async function hold(host: string): Promise<{ server: Server; port: number }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { server, port: (server.address() as { port: number }).port };
}

afterEach(() => {
  vi.unstubAllEnvs();
});

describe('npm run dev ports', () => {
  it('puts the service on PORT and the emulator on PORT+1, 8787 by default', () => {
    vi.stubEnv('PORT', undefined);
    expect(devPorts()).toEqual({ service: 8787, emulator: 8788 });
    expect(devPorts('9100')).toEqual({ service: 9100, emulator: 9101 });
    for (const bad of ['abc', '0', '65535', '80.5', '-1', ''])
      expect(() => devPorts(bad), bad).toThrow(/^PORT must be a port number/);
  });

  it('names PORT in one line when a port is taken, on 127.0.0.1 or on every address', async () => {
    for (const host of ['127.0.0.1', '0.0.0.0']) {
      const { server, port } = await hold(host);
      try {
        const err = await ensurePortFree(port, 'service, PORT').then(
          () => null,
          (e: Error) => e,
        );
        expect(err?.message).toBe(
          `port ${port} is taken (service, PORT); set PORT=... to use another (the service takes PORT, the Lark emulator PORT+1)`,
        );
      } finally {
        await new Promise((r) => server.close(r));
      }
      await expect(ensurePortFree(port, 'service, PORT')).resolves.toBeUndefined();
    }
  });
});

describe('the env file handed to wrangler dev', () => {
  it('quotes values so JSON, # and $ arrive verbatim', () => {
    expect(
      envFileText({
        SECRET_KEYS: '{"1":"k/+="}',
        DATABASE_URL: 'postgres://u:p$HOME#x@127.0.0.1:5432/db',
      }),
    ).toBe(`SECRET_KEYS='{"1":"k/+="}'\nDATABASE_URL='postgres://u:p\\$HOME#x@127.0.0.1:5432/db'\n`);
  });

  it('refuses a value it cannot quote, naming the variable and not the value', () => {
    for (const value of ["it's-secret", 'line\nbreak-secret']) {
      const message = (() => {
        try {
          envFileText({ ADMIN_TOKEN: value });
          return null;
        } catch (err) {
          return (err as Error).message;
        }
      })();
      expect(message).toMatch(/^ADMIN_TOKEN cannot hold/);
      expect(message).not.toContain('secret');
    }
  });
});
