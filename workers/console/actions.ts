import type { Context } from 'hono';
import { z } from 'zod';
import { bulkAudit, bulkDeadLetters, MessageId, oneDeadLetter } from '../admin/dead-letters';
import { pauseInstallation, resumeInstallation } from '../channel/pause';
import { rerunTurn, TURN_ID } from '../channel/rerun';
import type { AppEnv } from '../context';
import { BulkInput } from '../effects/dead-letters-bulk';
import { AppError } from '../errors';
import { RESUME_WAKE_LIMIT, wakeSessions } from '../installations/routes';
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
import { retentionOwner } from '../retention/owner';
import { typingMaintenance } from '../typing-ledger/maintenance';
import { REFUSED, RowId, removeManually } from '../typing-ledger/manual-removal';
import { csrfToken, type Session } from './session';
import { bulkPreviewView, bulkResultView } from './views';

type Form = Record<string, string | File>;
export interface ActionResult {
  target: string | null;
  outcome: string;
  /** The panel to return to. */
  panel: string;
  /** A page to show instead of returning to the panel (a preview, or a page with a next one). */
  view?: unknown;
}
type Action = (c: Context<AppEnv>, s: Session, form: Form) => Promise<ActionResult>;

const InstallationId = z.string().regex(INSTALLATION_ID, 'an installation id');
const Setting = z.enum(CHANGEABLE_SETTING_NAMES as [SettingName, ...SettingName[]]);
const TurnId = z.string().trim().regex(TURN_ID, "a turn's reply uuid");
const Backlog = z.enum(['answer', 'drop']);
const Generation = z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

/** A bulk form's fields (the admin routes' body, as text); the rest of the form is ignored. */
function bulkFields(form: Form) {
  const text = (k: string) =>
    typeof form[k] === 'string' && form[k] !== '' ? (form[k] as string) : undefined;
  return validInput(BulkInput, {
    installation: text('installation') ?? '',
    from: text('from'),
    to: text('to'),
    cursor: text('cursor'),
    limit: text('limit'),
  });
}

/** A page of a bulk requeue or discard: the admin route's function, then its result and the next page's form. */
function bulkAction(action: 'requeue' | 'discard'): Action {
  return async (c, s, form) => {
    const r = await bulkDeadLetters(c, action, bulkFields(form));
    return {
      ...bulkAudit(r),
      panel: 'effects',
      view: bulkResultView(r, await csrfToken(c.var.config, s)),
    };
  };
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
  // The admin routes' function (POST /admin/effects/dead-letters/:id/requeue and /discard).
  'dead-requeue': async (c, _s, form) => {
    const r = await oneDeadLetter(c, 'requeue', validInput(MessageId, form.message));
    return { target: `mailbox:${r.id}`, outcome: r.outcome, panel: 'effects' };
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
  // The admin routes' functions (POST /admin/lark/installations/:id/turns/:turnId/rerun,
  // /:id/pause, /:id/resume): the same locks, the same refusals, the same wake-ups.
  'turn-rerun': async (c, _s, form) => {
    const id = validInput(InstallationId, form.installation);
    const turnId = validInput(TurnId, form.turn);
    const r = await rerunTurn(c.var.db(), id, turnId);
    if (!r) throw new AppError('not_found', 'No such turn');
    wakeSessions(c, [r.sessionId]);
    return {
      target: `turn:${turnId}`,
      outcome: `re-run of turn ${r.turnNo} (${r.inputs} inputs)`,
      panel: 'lark',
    };
  },
  'installation-pause': async (c, s, form) => {
    const id = validInput(InstallationId, form.installation);
    const update = await pauseInstallation(c.var.db(), id, s.operator);
    if (!update) throw new AppError('not_found', 'No such installation');
    const ch = update.changed[0];
    return { target: id, outcome: ch ? `${ch.from} -> ${ch.to}` : 'unchanged: on', panel: 'lark' };
  },
  'installation-resume': async (c, s, form) => {
    const id = validInput(InstallationId, form.installation);
    const backlog = validInput(Backlog, form.backlog);
    const resumed = await resumeInstallation(c.var.db(), id, s.operator, backlog);
    if (!resumed) throw new AppError('not_found', 'No such installation');
    wakeSessions(c, resumed.conversations.slice(0, RESUME_WAKE_LIMIT));
    const ch = resumed.update.changed[0];
    const n = resumed.conversations.length;
    return {
      target: id,
      outcome: `${ch ? `${ch.from} -> ${ch.to}` : 'unchanged: off'} (backlog: ${backlog}, ${n} conversations)`,
      panel: 'lark',
    };
  },
  // Bulk dead letters (POST /admin/effects/dead-letters/*, the same function): the preview
  // shows the count and the first page, with the requeue and discard forms bound to its range.
  'dead-bulk-preview': async (c, s, form) => {
    const p = await bulkDeadLetters(c, 'preview', bulkFields(form));
    return {
      target: `${p.installation}:${p.from}..${p.to}`,
      outcome: `preview: ${p.count}${p.countCapped ? '+' : ''} dead-lettered`,
      panel: 'effects',
      view: bulkPreviewView(p, await csrfToken(c.var.config, s)),
    };
  },
  'dead-bulk-requeue': bulkAction('requeue'),
  'dead-bulk-discard': bulkAction('discard'),
  'dead-discard': async (c, _s, form) => {
    const r = await oneDeadLetter(c, 'discard', validInput(MessageId, form.message));
    return { target: `mailbox:${r.id}`, outcome: r.outcome, panel: 'effects' };
  },
};

/** What an audit row names as the target before the action ran (for refused actions). */
export function formTarget(form: Form): string | null {
  for (const [key, prefix] of [
    ['turn', 'turn:'],
    ['row', ''],
    ['message', 'mailbox:'],
    ['installation', ''],
  ] as const) {
    const v = form[key];
    if (typeof v === 'string') return `${prefix}${v.slice(0, 100)}`;
  }
  return null;
}
