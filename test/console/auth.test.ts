import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { issueSession, readSession, SESSION_TTL_MS } from '../../workers/console/session';
import { SUBKEY, subkey } from '../../workers/crypto/subkeys';
import worker from '../../workers/index';
import { fromBase64Url, toBase64Url } from '../../workers/lib/base64';
import { uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { action, BASE, page, post, signIn } from './helpers';

const config = () => ({ ADMIN_TOKEN: env.ADMIN_TOKEN!, SECRET_KEYS: JSON.parse(env.SECRET_KEYS!) });

describe('console sign-in', () => {
  it('shows the sign-in form without a session', async () => {
    const res = await page();
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain('action="/console/login"');
    expect(html).not.toContain('id="panel-typing"');
  });

  it('refuses a wrong admin token with 401 and sets no cookie', async () => {
    const res = await post('/console/login', { operator: 'ops', token: `${env.ADMIN_TOKEN}x` });
    expect(res.status).toBe(401);
    expect(res.headers.get('set-cookie')).toBeNull();
    expect(await res.text()).toContain('data-code="unauthorized"');
  });

  it('console.sign_in_rate_limited: every attempt from one address counts, and past the limit even the right token gets 429 and no cookie', async () => {
    // The sign-in limiter swapped for one that allows 3 a minute (vitest.config.ts).
    const tight = {
      ...env,
      CONSOLE_SIGN_IN_RATE_LIMIT: (env as unknown as Record<string, unknown>).TEST_RATE_LIMIT_3,
    } as typeof env;
    const attempt = async (address: string, token: string) => {
      const ctx = createExecutionContext();
      const res = await worker.fetch(
        new Request(`${BASE}/console/login`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', 'cf-connecting-ip': address },
          body: new URLSearchParams({ operator: 'ops', token }).toString(),
          redirect: 'manual',
        }),
        tight,
        ctx,
      );
      await waitOnExecutionContext(ctx);
      return res;
    };
    const guesser = uid('address');
    expect((await attempt(guesser, `${env.ADMIN_TOKEN}x`)).status).toBe(401);
    expect((await attempt(guesser, `${env.ADMIN_TOKEN}y`)).status).toBe(401);
    expect((await attempt(guesser, env.ADMIN_TOKEN!)).status).toBe(303);
    const limited = await attempt(guesser, env.ADMIN_TOKEN!);
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('60');
    expect(limited.headers.get('set-cookie')).toBeNull();
    expect(await limited.text()).toContain('data-code="rate_limited"');
    // Another address is not held by this one's attempts.
    expect((await attempt(uid('address'), env.ADMIN_TOKEN!)).status).toBe(303);
  });

  it('refuses a missing operator with 400', async () => {
    const res = await post('/console/login', { operator: ' ', token: env.ADMIN_TOKEN! });
    expect(res.status).toBe(400);
    expect(res.headers.get('set-cookie')).toBeNull();
  });

  it('sets an HttpOnly, SameSite=Strict, Secure session cookie on /console', async () => {
    const res = await post('/console/login', { operator: 'ops', token: env.ADMIN_TOKEN! });
    expect(res.status).toBe(303);
    const cookie = res.headers.get('set-cookie')!;
    expect(cookie).toMatch(/^rl_console=[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43};/);
    expect(cookie).toMatch(/; HttpOnly/);
    expect(cookie).toMatch(/; SameSite=Strict/);
    expect(cookie).toMatch(/; Secure/);
    expect(cookie).toMatch(/; Path=\/console/);
    expect(cookie).toMatch(/; Max-Age=1800/);
    expect(cookie).not.toContain(env.ADMIN_TOKEN!);
  });

  it('leaves Secure off only for plain-http loopback (npm run dev)', async () => {
    const res = await post(
      '/console/login',
      { operator: 'ops', token: env.ADMIN_TOKEN! },
      undefined,
      'http://127.0.0.1:8787',
    );
    const cookie = res.headers.get('set-cookie')!;
    expect(cookie).toMatch(/; HttpOnly/);
    expect(cookie).not.toMatch(/; Secure/);
  });

  it('treats a tampered, foreign or expired session as signed out', async () => {
    const { cookie } = await signIn();
    const [name, value] = cookie.split('=') as [string, string];
    const [payload, mac] = value.split('.') as [string, string];
    const flipped = `${name}=${payload}.${mac.startsWith('A') ? 'B' : 'A'}${mac.slice(1)}`;
    expect(await (await page(flipped)).text()).toContain('action="/console/login"');
    const now = Date.now();
    const issued = await issueSession(config(), 'ops', now);
    expect(await readSession(config(), issued, now + SESSION_TTL_MS - 1)).not.toBeNull();
    expect(await readSession(config(), issued, now + SESSION_TTL_MS)).toBeNull();
    // Rotating the admin token revokes every session signed with the old one.
    expect(
      await readSession({ ...config(), ADMIN_TOKEN: `${env.ADMIN_TOKEN}-rotated` }, issued, now),
    ).toBeNull();
  });

  it('shape_versions.console_session: a session signed by a newer release in a newer shape is no session here, logged', async () => {
    // Re-signed as workers/console/session.ts signs (its documented format): the payload at
    // shape version 2, the MAC valid, so only the version can refuse it.
    const now = Date.now();
    const [payload] = (await issueSession(config(), 'ops', now)).split('.') as [string];
    const session = JSON.parse(new TextDecoder().decode(fromBase64Url(payload))) as Record<string, unknown>;
    const newer = toBase64Url(new TextEncoder().encode(JSON.stringify({ ...session, _v: 2 })));
    const cfg = config();
    const key = await subkey(cfg.SECRET_KEYS[session.kv as string], SUBKEY.consoleSession);
    const mac = new Uint8Array(
      await crypto.subtle.sign(
        'HMAC',
        key,
        new TextEncoder().encode(`session\u0000${newer}\u0000${cfg.ADMIN_TOKEN}`),
      ),
    );
    const cookie = `${newer}.${toBase64Url(mac)}`;
    const same = toBase64Url(new TextEncoder().encode(JSON.stringify(session)));
    const sameMac = new Uint8Array(
      await crypto.subtle.sign(
        'HMAC',
        key,
        new TextEncoder().encode(`session\u0000${same}\u0000${cfg.ADMIN_TOKEN}`),
      ),
    );
    // The control: the same re-signing at version 1 is a session.
    expect(await readSession(cfg, `${same}.${toBase64Url(sameMac)}`, now)).not.toBeNull();
    const logs = captureLogLines({ quiet: true });
    try {
      expect(await readSession(cfg, cookie, now)).toBeNull();
    } finally {
      logs.restore();
    }
    expect(logs.lines.filter((l) => l.event === 'shape_version_refused')).toMatchObject([
      { shape: 'console session', version: 2, known: 1 },
    ]);
  });

  it('answers actions without a session with 401', async () => {
    const res = await post('/console/actions/typing-stop', { csrf: 'x', confirm: 'yes' });
    expect(res.status).toBe(401);
    expect(await res.text()).toContain('data-code="unauthorized"');
  });
});

describe('console CSRF', () => {
  it("refuses a missing, wrong or another session's CSRF token with 403 csrf_invalid and runs nothing", async () => {
    const a = await signIn('a@example.test');
    const b = await signIn('b@example.test');
    for (const csrf of [undefined, 'nope', b.csrf]) {
      const fields: Record<string, string> = { confirm: 'yes' };
      if (csrf) fields.csrf = csrf;
      const res = await post('/console/actions/typing-stop', fields, a.cookie);
      expect(res.status, String(csrf)).toBe(403);
      expect(await res.text()).toContain('data-code="csrf_invalid"');
    }
    // A JSON body carries no form token either.
    const { exports } = await import('cloudflare:workers');
    const json = await exports.default.fetch('https://console.test/console/actions/typing-stop', {
      method: 'POST',
      headers: { cookie: a.cookie, 'content-type': 'application/json' },
      body: JSON.stringify({ csrf: a.csrf, confirm: 'yes' }),
    });
    expect(json.status).toBe(403);
    expect(await (await page(a.cookie)).text()).toContain(
      'data-testid="typing-state"><span class="badge ok">enabled',
    );
  });

  it('refuses sign-out without the CSRF token', async () => {
    const a = await signIn();
    const res = await post('/console/logout', {}, a.cookie);
    expect(res.status).toBe(403);
  });

  it('refuses an unconfirmed action with 400 and an unknown one with 404', async () => {
    const a = await signIn();
    const unconfirmed = await post('/console/actions/typing-stop', { csrf: a.csrf }, a.cookie);
    expect(unconfirmed.status).toBe(400);
    expect(await unconfirmed.text()).toContain('data-code="confirmation_required"');
    const unknown = await action(a, 'toString');
    expect(unknown.status).toBe(404);
  });
});
