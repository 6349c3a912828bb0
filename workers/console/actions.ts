import type { Context } from 'hono';
import { z } from 'zod';
import type { AppEnv } from '../context';
import { actorHostStub } from '../effects/actor-host-stub';
import { discardDeadMessage, requeueDeadMessage } from '../effects/dead-letters';
import { AppError } from '../errors';
import {
  CHANGEABLE_SETTING_NAMES,
  type SettingName,
  SettingsChange,
  settingFromText,
  updateSettings,
} from '../installations/settings';
import { INSTALLATION_ID } from '../installations/store';
import { constantTimeEqual } from '../lib/constant-time';
import { validInput } from '../lib/json-body';
import { log } from '../log';
import { retentionOwner } from '../retention/owner';
import { typingMaintenance } from '../typing-ledger/maintenance';
import { REFUSED, RowId, removeManually } from '../typing-ledger/manual-removal';
import type { Session } from './session';

type Form = Record<string, string | File>;
export interface ActionResult {
  target: string | null;
  outcome: string;
  /** The panel to return to. */
  panel: string;
}
type Action = (c: Context<AppEnv>, s: Session, form: Form) => Promise<ActionResult>;

const MessageId = z.string().regex(/^\d{1,18}$/, 'a mailbox message id');
const InstallationId = z.string().regex(INSTALLATION_ID, 'an installation id');
const Setting = z.enum(CHANGEABLE_SETTING_NAMES as [SettingName, ...SettingName[]]);
const Generation = z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

/** Wakes the instance's host after a requeue; polling delivers anyway, so a failure is only logged. */
async function wake(c: Context<AppEnv>, instanceId: string): Promise<void> {
  await actorHostStub(c.env, instanceId)
    .wake(instanceId)
    .catch((err: unknown) => log.warn('console_wake_failed', { instanceId, error: err }));
}

/**
 * Every console action: the same owner calls the admin API makes (typing maintenance object,
 * retention cleanup Worker, manual removal, the effect runtime's dead-letter statements).
 */
export const ACTIONS: Record<string, Action> = {
  'typing-stop': async (c) => {
    const r = await typingMaintenance(c.env).stop();
    return { target: null, outcome: `stopped, generation ${r.stopGeneration}`, panel: 'typing' };
  },
  'typing-enable': async (c) => {
    const r = await typingMaintenance(c.env).enable();
    return { target: null, outcome: `enabled, generation ${r.stopGeneration}`, panel: 'typing' };
  },
  'retention-stop': async (c, s) => {
    const actor = { operator: s.operator, credential: 'admin' as const, requestId: c.var.requestId };
    const r = await retentionOwner(c.env).stop({ actor });
    if (!r.confirmed)
      throw new AppError(
        'service_unavailable',
        'Stop acknowledged, but the database fence did not commit: stop again',
      );
    return { target: null, outcome: `stopped, generation ${r.stopGeneration}`, panel: 'retention' };
  },
  // Enabling needs the cleanup's own credential (docs/retention.md), typed into the form: the
  // console session (the general admin token) alone cannot enable it.
  'retention-enable': async (c, s, form) => {
    const scoped = c.var.config.RETENTION_ADMIN_TOKEN;
    const given = typeof form.retention_token === 'string' ? form.retention_token : '';
    if (!scoped || !constantTimeEqual(given, scoped))
      throw new AppError(
        'forbidden',
        'Enabling the cleanup needs its own credential (RETENTION_ADMIN_TOKEN)',
      );
    const generation = validInput(Generation, form.generation);
    const actor = {
      operator: s.operator,
      credential: 'retention_admin' as const,
      requestId: c.var.requestId,
    };
    const r = await retentionOwner(c.env).enable({ actor, generation });
    if (r.refused === 'prerequisites') throw new AppError('precondition_failed', r.reason);
    if (r.refused === 'generation_changed') throw new AppError('conflict', r.reason);
    return { target: null, outcome: `enabled at generation ${generation}`, panel: 'retention' };
  },
  'badge-remove': async (c, _s, form) => {
    const rowId = validInput(RowId, form.row);
    const r = await removeManually(c.var.db(), c.var.config.SECRET_KEYS, rowId);
    if (r.kind !== 'done') {
      const [code, message] = REFUSED[r.kind];
      throw new AppError(code, message);
    }
    return { target: rowId, outcome: `${r.outcome} (Lark code ${r.code}, via ${r.via})`, panel: 'typing' };
  },
  'dead-requeue': async (c, _s, form) => {
    const id = validInput(MessageId, form.message);
    const instanceId = await requeueDeadMessage(c.var.db(), id);
    if (!instanceId) throw new AppError('not_found', 'No such dead-lettered message');
    await wake(c, instanceId);
    return { target: `mailbox:${id}`, outcome: 'requeued', panel: 'effects' };
  },
  // The admin route's change (PATCH /admin/lark/installations/:id/settings), one setting a form.
  'settings-update': async (c, s, form) => {
    const id = validInput(InstallationId, form.installation);
    const setting = validInput(Setting, form.setting);
    const text = typeof form.value === 'string' ? form.value.trim() : '';
    const change = validInput(SettingsChange, { [setting]: settingFromText(setting, text) });
    const update = await updateSettings(c.var.db(), id, change, s.operator);
    if (!update) throw new AppError('not_found', 'No such installation');
    const ch = update.changed[0];
    return {
      target: `${id}:${setting}`,
      outcome: ch ? `${ch.from} -> ${ch.to}` : `unchanged: ${update.settings[setting]}`,
      panel: 'lark',
    };
  },
  'dead-discard': async (c, _s, form) => {
    const id = validInput(MessageId, form.message);
    if (!(await discardDeadMessage(c.var.db(), id)))
      throw new AppError('not_found', 'No such dead-lettered message');
    return { target: `mailbox:${id}`, outcome: 'discarded', panel: 'effects' };
  },
};

/** What an audit row names as the target before the action ran (for refused actions). */
export function formTarget(form: Form): string | null {
  for (const [key, prefix] of [
    ['row', ''],
    ['message', 'mailbox:'],
    ['installation', ''],
  ] as const) {
    const v = form[key];
    if (typeof v === 'string') return `${prefix}${v.slice(0, 100)}`;
  }
  return null;
}
