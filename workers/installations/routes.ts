import { Hono } from 'hono';
import { z } from 'zod';
import { pauseInstallation, resumeInstallation } from '../channel/pause';
import { rerunTurn, TURN_ID } from '../channel/rerun';
import { Operator, recordAction } from '../console/audit';
import type { AppEnv } from '../context';
import { actorHostStub } from '../effects/actor-host-stub';
import { AppError } from '../errors';
import { API_BASE_RULE, isAllowedApiBase } from '../lark/api-base';
import { readJsonBody } from '../lib/json-body';
import { pgText } from '../lib/pg-text';
import { log } from '../log';
import { requireAdmin } from '../middleware';
import { readSettings, SettingsChange, type SettingsUpdate, updateSettings } from './settings';
import {
  deleteInstallation,
  getInstallationRow,
  INSTALLATION_ID,
  InstallationWorkspaceId,
  insertInstallation,
  publicView,
  rotateInstallation,
} from './store';

/** `lark` and `feishu` name the two public hosts; anything else must be https (or loopback http). */
const ApiBase = z
  .union([z.enum(['lark', 'feishu']), z.url().refine(isAllowedApiBase, API_BASE_RULE)])
  .transform((v) =>
    v === 'lark' ? 'https://open.larksuite.com' : v === 'feishu' ? 'https://open.feishu.cn' : v,
  )
  .transform((v) => v.replace(/\/+$/, ''));
const Secret = pgText().min(1).max(512);

export const Register = z.strictObject({
  workspace_id: InstallationWorkspaceId,
  app_id: z.string().regex(/^cli_[A-Za-z0-9]+$/, 'a Lark App ID (cli_…)'),
  app_secret: Secret,
  verification_token: Secret,
  encrypt_key: Secret.nullish(),
  api_base: ApiBase.optional(),
});

export const ChangeSettings = z.strictObject({ operator: Operator, settings: SettingsChange });
export const Pause = z.strictObject({ operator: Operator });
export const Resume = z.strictObject({ operator: Operator, backlog: z.enum(['answer', 'drop']) });
export const Rerun = z.strictObject({ operator: Operator });

/**
 * Resumed conversations whose hosts the route wakes itself (after the answer); the rest are
 * found by the minute cron's mailbox poll.
 */
export const RESUME_WAKE_LIMIT = 100;

/** Each changed setting in console_audit with its operator, as console actions are. */
async function audit(
  c: { var: AppEnv['Variables'] },
  id: string,
  operator: string,
  action: string,
  update: SettingsUpdate,
  detail = '',
) {
  for (const ch of update.changed)
    await recordAction(c.var.db(), {
      operator,
      action,
      target: `${id}:${ch.setting}`,
      outcome: `${ch.from} -> ${ch.to}${detail}`,
      requestId: c.var.requestId,
    });
}

export const Rotate = z
  .strictObject({
    app_secret: Secret.optional(),
    verification_token: Secret.optional(),
    encrypt_key: Secret.nullable().optional(),
    api_base: ApiBase.optional(),
  })
  .refine((r) => Object.keys(r).length > 0, 'nothing to rotate');

/** The :id of a route; one that is not an installation id names none (never reaches SQL). */
function idParam(c: { req: { param(name: 'id'): string } }): string {
  const id = c.req.param('id');
  if (!INSTALLATION_ID.test(id)) throw new AppError('not_found', 'No such installation');
  return id;
}

/** Admin API for Lark installations; secrets go in, never come out. */
export const installations = new Hono<AppEnv>()
  .use('*', requireAdmin())
  .post('/', async (c) => {
    const input = await readJsonBody(c, Register);
    const keys = c.var.config.SECRET_KEYS;
    const row = await insertInstallation(c.var.db(), keys, {
      workspaceId: input.workspace_id,
      appId: input.app_id,
      apiBase: input.api_base ?? c.var.config.LARK_API_BASE.replace(/\/+$/, ''),
      appSecret: input.app_secret,
      verificationToken: input.verification_token,
      encryptKey: input.encrypt_key ?? null,
    }).catch((err: { code?: string }) => {
      // lark_installations_app: one installation per app, in any workspace (docs/lark.md).
      if (err.code === '23505') throw new AppError('conflict', 'This Lark app is already installed');
      throw err;
    });
    log.info('lark_installation_registered', { installationId: row.id, appId: row.app_id });
    return c.json({ installation: publicView(row) }, 201);
  })
  .get('/:id', async (c) => {
    const row = await getInstallationRow(c.var.db(), idParam(c));
    if (!row) throw new AppError('not_found', 'No such installation');
    return c.json({ installation: publicView(row) });
  })
  .post('/:id/rotate', async (c) => {
    const id = idParam(c);
    const input = await readJsonBody(c, Rotate);
    const row = await rotateInstallation(c.var.db(), c.var.config.SECRET_KEYS, id, {
      apiBase: input.api_base,
      appSecret: input.app_secret,
      verificationToken: input.verification_token,
      encryptKey: input.encrypt_key,
    });
    if (!row) throw new AppError('not_found', 'No such installation');
    log.info('lark_installation_rotated', {
      installationId: row.id,
      fields: Object.keys(input),
      credentialVersion: row.credential_version,
    });
    return c.json({ installation: publicView(row) });
  })
  .get('/:id/settings', async (c) => {
    const id = idParam(c);
    if (!(await getInstallationRow(c.var.db(), id))) throw new AppError('not_found', 'No such installation');
    return c.json({ settings: await readSettings(c.var.db(), id) });
  })
  // Each change is recorded with its operator in console_audit, as console actions are.
  .patch('/:id/settings', async (c) => {
    const id = idParam(c);
    const input = await readJsonBody(c, ChangeSettings);
    const update = await updateSettings(c.var.db(), id, input.settings, input.operator);
    if (!update) throw new AppError('not_found', 'No such installation');
    await audit(c, id, input.operator, 'settings.update', update);
    return c.json({ settings: update.settings, changed: update.changed });
  })
  // The answer is the acknowledgement: once it is sent, no turn of the installation starts
  // (channel/pause.ts). Pausing a paused installation changes nothing and answers the same.
  .post('/:id/pause', async (c) => {
    const id = idParam(c);
    const input = await readJsonBody(c, Pause);
    const update = await pauseInstallation(c.var.db(), id, input.operator);
    if (!update) throw new AppError('not_found', 'No such installation');
    await audit(c, id, input.operator, 'installation.pause', update);
    return c.json({ settings: update.settings, changed: update.changed });
  })
  .post('/:id/resume', async (c) => {
    const id = idParam(c);
    const input = await readJsonBody(c, Resume);
    const resumed = await resumeInstallation(c.var.db(), id, input.operator, input.backlog);
    if (!resumed) throw new AppError('not_found', 'No such installation');
    await audit(c, id, input.operator, 'installation.resume', resumed.update, ` (backlog: ${input.backlog})`);
    wakeSessions(c, resumed.conversations.slice(0, RESUME_WAKE_LIMIT));
    return c.json({
      settings: resumed.update.settings,
      changed: resumed.update.changed,
      backlog: input.backlog,
      conversations: resumed.conversations.length,
    });
  })
  // Under the installation because a turn belongs to one (the route checks it does); the turn
  // is named by its reply uuid, the one id of a turn that logs, the console and Lark share.
  // 202: the new turn starts in the conversation actor, after its debounce (channel/rerun.ts).
  .post('/:id/turns/:turnId/rerun', async (c) => {
    const id = idParam(c);
    const turnId = c.req.param('turnId');
    if (!TURN_ID.test(turnId)) throw new AppError('not_found', 'No such turn');
    const input = await readJsonBody(c, Rerun);
    const rerun = await rerunTurn(c.var.db(), id, turnId);
    if (!rerun) throw new AppError('not_found', 'No such turn');
    await recordAction(c.var.db(), {
      operator: input.operator,
      action: 'turn.rerun',
      target: `turn:${turnId}`,
      outcome: `re-run of turn ${rerun.turnNo} (${rerun.inputs} inputs)`,
      requestId: c.var.requestId,
    });
    wakeSessions(c, [rerun.sessionId]);
    return c.json(
      { rerun: { session_id: rerun.sessionId, turn_no: rerun.turnNo, inputs: rerun.inputs } },
      202,
    );
  })
  .delete('/:id', async (c) => {
    const id = idParam(c);
    const deleted = await deleteInstallation(c.var.db(), id);
    if (!deleted) throw new AppError('not_found', 'No such installation');
    log.info('lark_installation_deleted', { installationId: id });
    return c.json({ deleted: true });
  });

/**
 * Wakes conversations after the answer (resumed ones, a re-run's); a lost wake-up is the
 * minute poll's to recover. Also the console's (its actions call the same functions).
 */
export function wakeSessions(
  c: { env: AppEnv['Bindings']; executionCtx: Pick<ExecutionContext, 'waitUntil'> },
  sessionIds: string[],
) {
  const woken = Promise.all(
    sessionIds.map((id) =>
      actorHostStub(c.env, id)
        .wake(id)
        .catch((err: unknown) => log.warn('channel_wake_failed', { sessionId: id, error: err })),
    ),
  );
  try {
    c.executionCtx.waitUntil(woken);
  } catch {
    // By design: no execution context (a direct app.request in a test); the wake-ups still run.
  }
}
