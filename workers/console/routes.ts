import { type Context, Hono } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { InspectQuery, inspect } from '../channel/inspect';
import type { AppEnv } from '../context';
import { withTx } from '../db/tx';
import { AppError } from '../errors';
import { constantTimeEqual } from '../lib/constant-time';
import { assertStorable, validInput } from '../lib/json-body';
import { log } from '../log';
import { enforceRateLimit } from '../rate-limit';
import { listGivenUp } from '../typing-ledger/given-up';
import { ACTIONS, formTarget } from './actions';
import { Operator, recordAction } from './audit';
import { type ConsoleData, loadConsole } from './data';
import { inspectView } from './inspect-view';
import { page, securityHeaders } from './layout';
import {
  cookieOptions,
  csrfToken,
  csrfValid,
  issueSession,
  readSession,
  SESSION_COOKIE,
  SESSION_TTL_MS,
  type Session,
} from './session';
import { dashboardView, errorView, loginView } from './views';

/** Form fields as strings; a body that is not a form reads as empty (then CSRF refuses it). */
async function form(c: Context<AppEnv>): Promise<Record<string, string | File>> {
  const type = c.req.header('content-type') ?? '';
  if (!/^(application\/x-www-form-urlencoded|multipart\/form-data)/i.test(type)) return {};
  const fields = (await c.req.parseBody().catch(() => ({}))) as Record<string, string | File>;
  // The one storable-text check (lib/pg-text.ts): a field Postgres cannot store is 400.
  assertStorable(Object.fromEntries(Object.entries(fields).filter(([, v]) => typeof v === 'string')));
  return fields;
}

async function render(
  c: Context<AppEnv>,
  status: 200 | 401 | 403 | 400 | 404 | 409 | 410 | 412 | 413 | 429,
  body: unknown,
) {
  const nonce = crypto.randomUUID().replaceAll('-', '');
  const text = await page('reaction-ledger console', nonce, body);
  return c.html(text, status, securityHeaders(nonce));
}

async function session(c: Context<AppEnv>): Promise<Session | null> {
  return readSession(c.var.config, getCookie(c, SESSION_COOKIE), c.var.clock.now());
}

/** A signed-in POST: the session (401) and its CSRF token (403 csrf_invalid), in that order. */
async function guarded(c: Context<AppEnv>) {
  const s = await session(c);
  if (!s) throw new AppError('unauthorized', 'Sign in first');
  const fields = await form(c);
  if (!(await csrfValid(c.var.config, s, fields.csrf)))
    throw new AppError('csrf_invalid', 'Missing or stale CSRF token: reload the console and try again');
  return { s, fields };
}

/** The first abandoned badges of up to five workspaces, for the retry buttons. */
async function abandonedRows(c: Context<AppEnv>, d: ConsoleData) {
  const ids = (d.typing?.workspaces ?? [])
    .filter((w) => w.abandoned > 0)
    .slice(0, 5)
    .map((w) => w.workspace_id);
  if (ids.length === 0) return [];
  return withTx(c.var.db(), { budgetMs: 3000, maxAttempts: 1 }, async (tx) => {
    const pages = [];
    for (const workspaceId of ids)
      pages.push(...(await listGivenUp(tx, { workspaceId, state: 'abandoned', limit: 5 })).rows);
    return pages as unknown as Record<string, unknown>[];
  }).catch((err: unknown) => {
    log.error('console_read_failed', { part: 'abandoned', error: err });
    return [];
  });
}

/**
 * The operator console (docs/operations.md "Console"): server-rendered HTML, signed in with
 * the admin token, every action a confirmed POST with the session's CSRF token. Errors render
 * as a small page with the stable code (`data-code`); no token, secret or sealed value is
 * ever part of a page.
 */
export const consoleApp = new Hono<AppEnv>()
  .get('/', async (c) => {
    const s = await session(c);
    if (!s) return render(c, 200, loginView(null));
    const data = await loadConsole(c);
    const abandoned = await abandonedRows(c, data);
    return render(
      c,
      200,
      dashboardView(data, { operator: s.operator, csrf: await csrfToken(c.var.config, s), abandoned }),
    );
  })
  // The conversation inspector (GET: a search reads, it changes nothing; the re-run it offers is
  // a confirmed POST like every action).
  .get('/inspect', async (c) => {
    const s = await session(c);
    if (!s) return render(c, 401, loginView(null));
    const raw = c.req.query('q');
    const found =
      raw === undefined || raw === ''
        ? {
            installation: c.req.query('installation') ?? '',
            q: '',
            matches: [],
            conversation: null,
            timeline: [],
          }
        : await (async () => {
            const input = validInput(InspectQuery, {
              installation: c.req.query('installation'),
              q: raw,
              session: c.req.query('session'),
            });
            return {
              installation: input.installation,
              q: input.q,
              ...(await inspect(c.var.db(), input.installation, input.q, input.session)),
            };
          })();
    return render(
      c,
      200,
      inspectView({ operator: s.operator, csrf: await csrfToken(c.var.config, s), ...found }),
    );
  })
  .post('/login', async (c) => {
    // Every attempt counts, before the token is compared: a guesser over the limit learns
    // nothing more, not even whether a guess was right (docs/operations.md "Rate limits").
    await enforceRateLimit(
      c.env.CONSOLE_SIGN_IN_RATE_LIMIT,
      'console_sign_in',
      c.req.header('cf-connecting-ip') ?? 'unknown',
    );
    const fields = await form(c);
    const token = typeof fields.token === 'string' ? fields.token : '';
    if (!constantTimeEqual(token, c.var.config.ADMIN_TOKEN)) {
      log.warn('console_sign_in_refused', { requestId: c.var.requestId });
      return render(c, 401, loginView('unauthorized'));
    }
    const operator = Operator.safeParse(fields.operator);
    if (!operator.success) return render(c, 400, loginView('validation_failed'));
    const value = await issueSession(c.var.config, operator.data, c.var.clock.now());
    setCookie(c, SESSION_COOKIE, value, cookieOptions(c.req.url, SESSION_TTL_MS / 1000));
    log.info('console_signed_in', { operator: operator.data, requestId: c.var.requestId });
    return c.redirect('/console', 303);
  })
  .post('/logout', async (c) => {
    await guarded(c);
    deleteCookie(c, SESSION_COOKIE, cookieOptions(c.req.url, 0));
    return c.redirect('/console', 303);
  })
  .post('/actions/:name', async (c) => {
    const { s, fields } = await guarded(c);
    const name = c.req.param('name');
    const action = Object.hasOwn(ACTIONS, name) ? ACTIONS[name] : undefined;
    if (!action) throw new AppError('not_found', 'No such console action');
    if (fields.confirm !== 'yes')
      throw new AppError('confirmation_required', 'Tick confirm to run this action');
    const entry = { operator: s.operator, action: name, requestId: c.var.requestId };
    try {
      const r = await action(c, s, fields);
      await recordAction(c.var.db(), { ...entry, target: r.target, outcome: r.outcome });
      if (r.view !== undefined) return render(c, 200, r.view);
      return c.redirect(`/console#panel-${r.panel}`, 303);
    } catch (err) {
      const code = err instanceof AppError ? err.code : 'internal_error';
      await recordAction(c.var.db(), { ...entry, target: formTarget(fields), outcome: `refused: ${code}` });
      throw err;
    }
  })
  .onError(async (err, c) => {
    const e = err instanceof AppError ? err : null;
    if (!e) log.error('unhandled_error', { requestId: c.var.requestId, path: c.req.path, error: err });
    const code = e?.code ?? 'internal_error';
    const status = e?.status ?? 500;
    const nonce = crypto.randomUUID().replaceAll('-', '');
    const text = await page(
      'reaction-ledger console',
      nonce,
      errorView(status, code, e?.message ?? 'Internal error'),
    );
    return c.html(text, status, { ...e?.headers, ...securityHeaders(nonce) });
  });
