import type { Pool, PoolClient } from '@neondatabase/serverless';
import { z } from 'zod';
import { log } from '../log';

type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

/**
 * Per-installation settings (migration 0180, `lark_installation_settings`): one row an
 * installation, absent until an operator first changes one, so a missing row is every default.
 * `SETTINGS` is the one list of settings: each is a text column of that table (its migration adds
 * the column with the same default and a check of the same values), a zod schema the admin route
 * and the console validate with, and its default. Adding a setting is a migration and one entry.
 */
export const SETTINGS = {
  /** `text`: one text message after the agent finished; `card_stream`: a CardKit card typed out as the agent answers. */
  reply_mode: { schema: z.enum(['text', 'card_stream']), default: 'text' },
  // Issue 33 item 1 (migration 0200).
  /** What the user sees when a turn fails: nothing, an emoji on its newest input, or a short reply (failure-notice.ts). */
  failure_notice: { schema: z.enum(['none', 'reaction', 'reply']), default: 'none' },
  /**
   * `on`: inputs are recorded, no turn starts, no badge is added. Read here; changed only by the
   * pause and resume routes (pause.ts), which serialize against turn starts and take the
   * backlog choice, so a settings change cannot name it.
   */
  paused: { schema: z.enum(['off', 'on']), default: 'off', routeOnly: true },
} as const satisfies Record<string, { schema: z.ZodEnum; default: string; routeOnly?: true }>;

export type SettingName = keyof typeof SETTINGS;
export type InstallationSettings = { [K in SettingName]: z.infer<(typeof SETTINGS)[K]['schema']> };

const NAMES = Object.keys(SETTINGS) as SettingName[];

export const SETTINGS_DEFAULTS = Object.fromEntries(
  NAMES.map((n) => [n, SETTINGS[n].default]),
) as InstallationSettings;

/** The settings a settings change may name (not the ones their own routes change). */
type ChangeableName = {
  [K in SettingName]: (typeof SETTINGS)[K] extends { routeOnly: true } ? never : K;
}[SettingName];
const CHANGEABLE = NAMES.filter((n) => !('routeOnly' in SETTINGS[n])) as ChangeableName[];

/** A change names at least one setting; unknown names or values (and route-only settings) are refused. */
export const SettingsChange = z
  .strictObject(
    Object.fromEntries(CHANGEABLE.map((n) => [n, SETTINGS[n].schema.optional()])) as {
      [K in ChangeableName]: z.ZodOptional<(typeof SETTINGS)[K]['schema']>;
    },
  )
  .refine((s) => Object.values(s).some((v) => v !== undefined), 'name at least one setting');
export type SettingsChange = Partial<InstallationSettings>;

// The statements name every column of SETTINGS; column names come from that constant list,
// never from input. Values are parameters.
const COLUMNS = NAMES.join(', ');
const READ = `select ${COLUMNS} from lark_installation_settings where installation_id = $1`;

/**
 * One statement: the row is created with the defaults and the change, or updated, and the
 * previous values come back for the record. No row when the installation does not exist
 * (the insert selects from lark_installations; nothing is written).
 * $1 installation, $2 operator, then per setting: its new value (null: unchanged), its default.
 */
const UPSERT = (() => {
  const value = (i: number) => `$${3 + 2 * i}::text`;
  const fallback = (i: number) => `$${4 + 2 * i}::text`;
  return `
with before as (select ${COLUMNS} from lark_installation_settings where installation_id = $1)
insert into lark_installation_settings as s (installation_id, updated_by, ${COLUMNS})
select i.id, $2, ${NAMES.map((_, i) => `coalesce(${value(i)}, ${fallback(i)})`).join(', ')}
  from lark_installations i where i.id = $1
on conflict (installation_id) do update
   set updated_at = app_now(), updated_by = $2,
       ${NAMES.map((n, i) => `${n} = coalesce(${value(i)}, s.${n})`).join(',\n       ')}
returning ${NAMES.map((n) => `s.${n}, (select ${n} from before) as old_${n}`).join(', ')}`;
})();

/** The installation's settings, defaults where no row exists (one primary-key read). */
export async function readSettings(q: Q, installationId: string): Promise<InstallationSettings> {
  const { rows } = await q.query<InstallationSettings>(READ, [installationId]);
  return { ...SETTINGS_DEFAULTS, ...rows[0] };
}

export interface SettingsUpdate {
  settings: InstallationSettings;
  /** Each setting whose value changed, with its old and new value. */
  changed: { setting: SettingName; from: string; to: string }[];
}

export async function updateSettings(
  q: Q,
  installationId: string,
  change: SettingsChange,
  operator: string,
): Promise<SettingsUpdate | null> {
  const params: unknown[] = [installationId, operator];
  for (const n of NAMES) params.push(change[n] ?? null, SETTINGS[n].default);
  const { rows } = await q.query<Record<string, string | null>>(UPSERT, params);
  const row = rows[0];
  if (!row) return null;
  const settings = Object.fromEntries(NAMES.map((n) => [n, row[n]])) as InstallationSettings;
  const changed = NAMES.flatMap((setting) => {
    const from = row[`old_${setting}`] ?? SETTINGS[setting].default;
    const to = settings[setting];
    return from === to ? [] : [{ setting, from, to }];
  });
  if (changed.length > 0) log.info('installation_settings_changed', { installationId, operator, changed });
  return { settings, changed };
}
