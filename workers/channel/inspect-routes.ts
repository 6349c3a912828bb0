import { Hono } from 'hono';
import type { AppEnv } from '../context';
import { validInput } from '../lib/json-body';
import { requireAdmin } from '../middleware';
import { InspectQuery, inspect } from './inspect';

/**
 * GET /admin/lark/conversations?installation=<li_…>&q=<chat id | message id | open_id>[&session=<id>]: the
 * conversation inspector as JSON (the console's `/console/inspect` renders the same), for
 * operators who script it (docs/operations.md "Conversation inspector").
 */
export const conversationsAdmin = new Hono<AppEnv>().use('*', requireAdmin()).get('/', async (c) => {
  const input = validInput(InspectQuery, {
    installation: c.req.query('installation'),
    q: c.req.query('q'),
    session: c.req.query('session'),
  });
  return c.json(await inspect(c.var.db(), input.installation, input.q, input.session));
});
