import type { Pool, PoolClient } from '@neondatabase/serverless';
import { z } from 'zod';
import { log } from '../log';

type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

/**
 * Per-installation settings (migration 0180, `lark_installation_settings`): one row an
 * installation, absent until an operator first changes one, so a missing row is every default.
 * Readers go through `readSettings`, writers through `updateSettings`; the zod shape below is
 * the one list of settings and values (the admin route and the console validate with it).
 */
export const SETTINGS_DEFAULTS = {
  /** `text`: one text message after the agent finished; `card_stream`: a CardKit card typed out as the agent answers. */
  reply_mode: 'text',
} as const satisfies Record<string, string>;

export const InstallationSettings = z.strictObject({
  reply_mode: z.enum(['text', 'card_stream']),
});
export type InstallationSettings = z.infer<typeof InstallationSettings>;

/** A change names at least one setting; unknown names or values are refused by the shape. */
export const SettingsChange = InstallationSettings.partial().refine(
  (s) => Object.keys(s).length > 0,
  'name at least one setting',
);
export type SettingsChange = z.infer<typeof SettingsChange>;

const READ = `select reply_mode from lark_installation_settings where installation_id = $1`;

/** The installation's settings, defaults where no row exists (one primary-key read). */
export async function readSettings(q: Q, installationId: string): Promise<InstallationSettings> {
  const { rows } = await q.query<InstallationSettings>(READ, [installationId]);
  return { ...SETTINGS_DEFAULTS, ...rows[0] };
}

/**
 * One statement: the row is created with the defaults and the change, or updated, and the
 * previous values come back for the record. `null` when the installation does not exist (the
 * foreign key refuses the insert; nothing is written).
 */
const UPSERT = `
with before as (select reply_mode from lark_installation_settings where installation_id = $1)
insert into lark_installation_settings as s (installation_id, reply_mode, updated_by)
select i.id, coalesce($2, $4), $3 from lark_installations i where i.id = $1
on conflict (installation_id) do update
   set reply_mode = coalesce($2, s.reply_mode), updated_at = app_now(), updated_by = $3
returning s.reply_mode, (select reply_mode from before) as old_reply_mode`;

export interface SettingsUpdate {
  settings: InstallationSettings;
  /** Each setting whose value changed, with its old and new value. */
  changed: { setting: keyof InstallationSettings; from: string; to: string }[];
}

export async function updateSettings(
  q: Q,
  installationId: string,
  change: SettingsChange,
  operator: string,
): Promise<SettingsUpdate | null> {
  const { rows } = await q.query<{
    reply_mode: InstallationSettings['reply_mode'];
    old_reply_mode: string | null;
  }>(UPSERT, [installationId, change.reply_mode ?? null, operator, SETTINGS_DEFAULTS.reply_mode]);
  const row = rows[0];
  if (!row) return null;
  const settings: InstallationSettings = { reply_mode: row.reply_mode };
  const from = row.old_reply_mode ?? SETTINGS_DEFAULTS.reply_mode;
  const changed =
    from === settings.reply_mode ? [] : [{ setting: 'reply_mode' as const, from, to: settings.reply_mode }];
  if (changed.length > 0) log.info('installation_settings_changed', { installationId, operator, changed });
  return { settings, changed };
}
