import { env, exports } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { testPool } from '../helpers/db';
import { emu } from '../lark/helpers';
import { quietEmulator, trackWorkspaces } from '../typing-maintenance/helpers';

export const BASE = 'https://console.test';

export interface Signed {
  cookie: string;
  csrf: string;
  html: string;
}

function form(fields: Record<string, string>): RequestInit {
  return {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(fields).toString(),
    redirect: 'manual',
  };
}

export function post(path: string, fields: Record<string, string>, cookie?: string, base = BASE) {
  const init = form(fields);
  if (cookie) (init.headers as Record<string, string>).cookie = cookie;
  return exports.default.fetch(`${base}${path}`, init);
}

export async function page(cookie?: string): Promise<Response> {
  return exports.default.fetch(`${BASE}/console`, { headers: cookie ? { cookie } : {} });
}

/** Signs in and reads the dashboard: the session cookie and the page's CSRF token. */
export async function signIn(operator = 'ops@example.test'): Promise<Signed> {
  const res = await post('/console/login', { operator, token: env.ADMIN_TOKEN! });
  if (res.status !== 303) throw new Error(`sign-in answered ${res.status}`);
  const cookie = res.headers.get('set-cookie')!.split(';')[0]!;
  const html = await (await page(cookie)).text();
  const csrf = /name="csrf" value="([^"]+)"/.exec(html)?.[1];
  if (!csrf) throw new Error('no CSRF token on the page');
  return { cookie, csrf, html };
}

export function action(s: Signed, name: string, fields: Record<string, string> = {}) {
  return post(`/console/actions/${name}`, { csrf: s.csrf, confirm: 'yes', ...fields }, s.cookie);
}

/** Every secret value the Worker holds. */
export function secretValues(): [string, string][] {
  const keys = JSON.parse(env.SECRET_KEYS!) as Record<string, string>;
  return [
    ['ADMIN_TOKEN', env.ADMIN_TOKEN!],
    ['RETENTION_ADMIN_TOKEN', env.RETENTION_ADMIN_TOKEN!],
    ['ACTOR_JWT_SECRET', env.ACTOR_JWT_SECRET!],
    ...Object.entries(keys).map(([v, k]): [string, string] => [`SECRET_KEYS[${v}]`, k]),
    ['DATABASE_URL', env.DATABASE_URL!],
  ];
}

/** The file's pool, a quiet emulator with faults cleared after each test, and its workspaces dropped at the end. */
export function fixtures() {
  const f = { pool: undefined as unknown as Pool, ...trackWorkspaces() };
  beforeAll(async () => {
    f.pool = testPool(4);
    await quietEmulator();
  });
  afterEach(async () => {
    await emu('faults', undefined, 'DELETE');
  });
  afterAll(async () => {
    await f.dropAll(f.pool);
    await quietEmulator(true);
    await f.pool.end();
  });
  return f;
}

/** The console actions an operator ran (done or refused), in order: what `console_audit` recorded. */
export async function auditOf(pool: Pick<Pool, 'query'>, operator: string) {
  const { rows } = await pool.query<{ action: string; target: string | null; outcome: string }>(
    'select action, target, outcome from console_audit where operator = $1 order by id',
    [operator],
  );
  return rows;
}
