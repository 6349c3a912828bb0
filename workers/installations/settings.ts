import type { Pool, PoolClient } from '@neondatabase/serverless';
import { z } from 'zod';
import { log } from '../log';

type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

/** A column's value as Postgres stores it (a text or a bigint column, null allowed where the column is nullable). */
type ColumnValue = string | number | null;

/**
 * One setting: the zod schema of its API value (the admin route and the console validate with
 * it), its default, and its column in `lark_installation_settings` (its migration adds the
 * column with the same default and a check of the same values). A value whose column form
 * differs (`none` stored as null in a bigint column) says how in `toColumn`/`fromColumn`.
 */
interface Setting {
  schema: z.ZodType;
  default: unknown;
  column: 'text' | 'bigint';
  toColumn?: (v: never) => ColumnValue;
  fromColumn?: (c: ColumnValue) => unknown;
  /** Changed only by its own routes (`paused`: pause.ts), never by a settings change. */
  routeOnly?: true;
}

/** A positive whole number up to `max`, or `none`; stored as a bigint, `none` as null. */
function countOrNone(max: number) {
  return {
    schema: z.union([z.literal('none'), z.int().min(1).max(max)]),
    default: 'none' as const,
    column: 'bigint' as const,
    toColumn: (v: 'none' | number): ColumnValue => (v === 'none' ? null : v),
    fromColumn: (c: ColumnValue): 'none' | number => (c === null ? 'none' : Number(c)),
  };
}

/**
 * Per-installation settings (migrations/0030_baseline_lark.sql, `lark_installation_settings`): one row an
 * installation, absent until an operator first changes one, so a missing row is every default.
 * `SETTINGS` is the one list of settings. Adding a setting is a migration and one entry.
 * docs/operations.md "Installation settings" says what each does.
 */
export const SETTINGS = {
  /** `text`: one text message after the agent finished; `card_stream`: a CardKit card typed out as the agent answers. */
  reply_mode: { schema: z.enum(['text', 'card_stream']), default: 'text', column: 'text' },
  // Issue 33 item 1 (migrations/0030_baseline_lark.sql), read by the webhook's accept statement (channel/accept.ts).
  /** `on`: a Typing badge on every answered input; `off`: never (no Add, no ledger row); `quiet`: none while held by a 429 or over the daily budget. */
  typing_badge: { schema: z.enum(['on', 'off', 'quiet']), default: 'on', column: 'text' },
  /** `always`: every group message is answered; `mentioned`: only one that @-mentions the bot. */
  reply_in_groups: { schema: z.enum(['always', 'mentioned']), default: 'always', column: 'text' },
  /** `quiet` adds no badge once the app made this many Lark calls today (UTC); `none`: no budget. */
  typing_daily_call_budget: countOrNone(1_000_000_000),
  // Issue 33 item 1 (migrations/0030_baseline_lark.sql).
  /** What the user sees when a turn fails: nothing, an emoji on its newest input, or a short reply (failure-notice.ts). */
  failure_notice: { schema: z.enum(['none', 'reaction', 'reply']), default: 'none', column: 'text' },
  /**
   * `on`: inputs are recorded, no turn starts, no badge is added. Read here; changed only by the
   * pause and resume routes (pause.ts), which serialize against turn starts and take the
   * backlog choice, so a settings change cannot name it.
   */
  paused: { schema: z.enum(['off', 'on']), default: 'off', column: 'text', routeOnly: true },
  // Issue 33 item 2 (migration 0210).
  /** `on`: a delivered reply is deleted once every input of its turn is recalled (recall.ts); `off`: it stays. */
  recall_reply: { schema: z.enum(['off', 'on']), default: 'off', column: 'text' },
} as const satisfies Record<string, Setting>;

export type SettingName = keyof typeof SETTINGS;
export type InstallationSettings = { [K in SettingName]: z.infer<(typeof SETTINGS)[K]['schema']> };
type AnySetting = Omit<Setting, 'toColumn'> & { toColumn?: (v: unknown) => ColumnValue };

const NAMES = Object.keys(SETTINGS) as SettingName[];
const entry = (n: SettingName) => SETTINGS[n] as unknown as AnySetting;
const toColumn = (n: SettingName, v: unknown): ColumnValue =>
  entry(n).toColumn ? entry(n).toColumn!(v) : (v as ColumnValue);
const fromColumn = (n: SettingName, c: ColumnValue): unknown =>
  entry(n).fromColumn ? entry(n).fromColumn!(c) : c;

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

// The statements name every column of SETTINGS; column names and types come from that constant
// list, never from input. Values are parameters.
const COLUMNS = NAMES.join(', ');
const READ = `select ${COLUMNS} from lark_installation_settings where installation_id = $1`;

/**
 * The installation's settings in column form, as one row named `name`, for a caller's own
 * `with` chain (the webhook's accept statement reads them in its own snapshot): every default
 * where no row exists. `installationId` is a SQL expression; the defaults are parameters from
 * `firstParam` on, in `params`.
 */
export function settingsCte(
  name: string,
  installationId: string,
  firstParam: number,
): { sql: string; params: ColumnValue[] } {
  const cols = NAMES.map(
    (n, i) =>
      `case when s.installation_id is null then $${firstParam + i}::${entry(n).column} else s.${n} end as ${n}`,
  );
  return {
    sql: `${name} as (
  select ${cols.join(',\n         ')}
    from (select 1) as one
    left join lark_installation_settings s on s.installation_id = ${installationId}
)`,
    params: NAMES.map((n) => toColumn(n, SETTINGS[n].default)),
  };
}

/**
 * One statement: the row is created with the defaults and the change, or updated, and the
 * previous values come back for the record. No row when the installation does not exist
 * (the insert selects from lark_installations; nothing is written).
 * $1 installation, $2 operator, then per setting: whether it changes, its new value, its default.
 */
const UPSERT = (() => {
  const set = (i: number) => `$${3 + 3 * i}::boolean`;
  const value = (i: number, n: SettingName) => `$${4 + 3 * i}::${entry(n).column}`;
  const fallback = (i: number, n: SettingName) => `$${5 + 3 * i}::${entry(n).column}`;
  return `
with before as (select ${COLUMNS} from lark_installation_settings where installation_id = $1)
insert into lark_installation_settings as s (installation_id, updated_by, ${COLUMNS})
select i.id, $2, ${NAMES.map((n, i) => `case when ${set(i)} then ${value(i, n)} else ${fallback(i, n)} end`).join(', ')}
  from lark_installations i where i.id = $1
on conflict (installation_id) do update
   set updated_at = app_now(), updated_by = $2,
       ${NAMES.map((n, i) => `${n} = case when ${set(i)} then ${value(i, n)} else s.${n} end`).join(',\n       ')}
returning exists (select 1 from before) as existed,
       ${NAMES.map((n) => `s.${n}, (select ${n} from before) as old_${n}`).join(', ')}`;
})();

/** A settings row in column form (a query's row, or its `to_jsonb`) as API values; none: every default. */
export function settingsFromRow(row: Record<string, ColumnValue> | null | undefined): InstallationSettings {
  if (!row) return { ...SETTINGS_DEFAULTS };
  return Object.fromEntries(NAMES.map((n) => [n, fromColumn(n, row[n] ?? null)])) as InstallationSettings;
}

/** The installation's settings, defaults where no row exists (one primary-key read). */
export async function readSettings(q: Q, installationId: string): Promise<InstallationSettings> {
  const { rows } = await q.query<Record<string, ColumnValue>>(READ, [installationId]);
  return settingsFromRow(rows[0]);
}

type SettingValue = InstallationSettings[SettingName];

/** Every setting's name, in SETTINGS order (the console lists them). */
export const SETTING_NAMES: readonly SettingName[] = NAMES;
/** The ones a settings change may name (the console's change form). */
export const CHANGEABLE_SETTING_NAMES: readonly SettingName[] = CHANGEABLE;

/**
 * A setting's value typed as text (a console form): the text itself when the setting takes it,
 * else a whole number when it is one. The caller validates the result with SettingsChange.
 */
export function settingFromText(name: SettingName, text: string): unknown {
  if (SETTINGS[name].schema.safeParse(text).success) return text;
  return /^\d{1,10}$/.test(text) ? Number(text) : text;
}

export interface SettingsUpdate {
  settings: InstallationSettings;
  /** Each setting whose value changed, with its old and new value. */
  changed: { setting: SettingName; from: SettingValue; to: SettingValue }[];
}

export async function updateSettings(
  q: Q,
  installationId: string,
  change: SettingsChange,
  operator: string,
): Promise<SettingsUpdate | null> {
  const params: unknown[] = [installationId, operator];
  for (const n of NAMES)
    params.push(
      change[n] !== undefined,
      change[n] === undefined ? null : toColumn(n, change[n]),
      toColumn(n, SETTINGS[n].default),
    );
  const { rows } = await q.query<Record<string, ColumnValue> & { existed: boolean }>(UPSERT, params);
  const row = rows[0];
  if (!row) return null;
  const settings = settingsFromRow(row);
  const before = row.existed
    ? settingsFromRow(Object.fromEntries(NAMES.map((n) => [n, row[`old_${n}`] ?? null])))
    : SETTINGS_DEFAULTS;
  const changed = NAMES.flatMap((setting) => {
    const from = before[setting];
    const to = settings[setting];
    return from === to ? [] : [{ setting, from, to }];
  });
  if (changed.length > 0) log.info('installation_settings_changed', { installationId, operator, changed });
  return { settings, changed };
}
