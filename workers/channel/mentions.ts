import type { Pool } from '@neondatabase/serverless';
import { Deadline } from '../clock';
import type { KeyRing } from '../crypto/sealed';
import { AppError } from '../errors';
import { SETTINGS_DEFAULTS } from '../installations/settings';
import { type Installation, type InstallationRow, openInstallation } from '../installations/store';
import { durableErrorLog } from '../lark/api-errors';
import { LarkClient } from '../lark/client';
import { LarkApiError } from '../lark/errors';
import { durableRateGate } from '../lark/rate-limits';
import type { MessageReceiveEvent } from '../lark/schemas';
import { log } from '../log';

/**
 * `reply_in_groups: mentioned` (issue 33): is a group message @-mentioning this bot? Compared
 * by the bot's own open_id (reference §6 "Mentions"), which Lark gives as `bot.open_id` of
 * `GET /open-apis/bot/v3/info`: fetched the first time an installation needs it and kept in
 * `lark_bot_identities` (migrations/0030_baseline_lark.sql) for as long as the installation exists, so it is one
 * Open API call per installation, whichever isolate gets the message. A mention of `@_all`
 * names no open_id and is not a mention of the bot.
 */

/** The fetch gets this much of the webhook's 3 s (token included, when this isolate has none). */
export const BOT_INFO_BUDGET_MS = 1000;

/** What the webhook reads before its accept statement, in the round trip that loads the installation. */
export interface WebhookInstallation {
  installation: Installation;
  /** The bot's open_id as fetched for this App ID and host, or null before the first fetch. */
  botOpenId: string | null;
  /** Only decides whether the open_id is worth fetching; the accept statement reads it again. */
  replyInGroups: string;
}

/**
 * The webhook's one read before the answer (it replaces the plain installation load): the
 * installation, its bot's cached open_id (only when fetched for its current App ID and host)
 * and its reply_in_groups.
 */
const LOAD = `
select i.*, b.open_id as bot_open_id, coalesce(s.reply_in_groups, $2) as reply_in_groups
  from lark_installations i
  left join lark_bot_identities b
    on b.installation_id = i.id and b.app_id = i.app_id and b.api_base = rtrim(i.api_base, '/')
  left join lark_installation_settings s on s.installation_id = i.id
 where i.id = $1`;

export async function loadWebhookInstallation(
  q: Pick<Pool, 'query'>,
  keys: KeyRing,
  id: string,
): Promise<WebhookInstallation | undefined> {
  const { rows } = await q.query<InstallationRow & { bot_open_id: string | null; reply_in_groups: string }>(
    LOAD,
    [id, SETTINGS_DEFAULTS.reply_in_groups],
  );
  const row = rows[0];
  if (!row) return undefined;
  return {
    installation: await openInstallation(keys, row),
    botOpenId: row.bot_open_id,
    replyInGroups: row.reply_in_groups,
  };
}

const STORE = `
insert into lark_bot_identities (installation_id, api_base, app_id, open_id)
values ($1, $2, $3, $4)
on conflict (installation_id) do update
   set api_base = excluded.api_base, app_id = excluded.app_id, open_id = excluded.open_id,
       fetched_at = app_now()`;

/**
 * What the accept statement is told about the message (its `bot_mentioned`): true or false for
 * a group message whose answer depends on it; null when it does not (p2p, or an installation
 * answering every group message whose bot was never fetched: the statement then answers it
 * under `always` and, should `mentioned` have been set in between, treats it as unmentioned).
 * A group message without mentions needs no fetch: it mentions nobody.
 */
export async function botMentioned(
  pool: Pool,
  loaded: WebhookInstallation,
  message: MessageReceiveEvent['message'],
): Promise<boolean | null> {
  if (message.chat_type !== 'group') return null;
  const mentions = message.mentions ?? [];
  if (mentions.length === 0) return false;
  let bot = loaded.botOpenId;
  if (bot === null) {
    if (loaded.replyInGroups !== 'mentioned') return null;
    bot = await fetchBotOpenId(pool, loaded.installation);
  }
  return mentions.some((m) => m.id?.open_id === bot);
}

/**
 * One Open API call through the durable rate gate (counted like every call), then the open_id
 * kept. A failed call is a 503 with nothing written: the message may well mention the bot,
 * and Lark redelivers it (15 s, 5 min, 1 h, 6 h). A failed store still answers this message.
 */
async function fetchBotOpenId(pool: Pool, inst: Installation): Promise<string> {
  const app = { apiBase: inst.apiBase, appId: inst.appId };
  const lark = new LarkClient(
    { baseUrl: inst.apiBase, appId: inst.appId, appSecret: inst.appSecret },
    { rateGate: durableRateGate(pool, app), errorLog: durableErrorLog(pool, app) },
  );
  let openId: string;
  try {
    openId = await lark.botOpenId({ deadline: new Deadline(BOT_INFO_BUDGET_MS) });
  } catch (err) {
    if (!(err instanceof LarkApiError)) throw err;
    log.warn('lark_bot_identity_failed', { installationId: inst.id, kind: err.kind, code: err.code });
    throw new AppError(
      'service_unavailable',
      "The bot's open_id could not be fetched from Lark: redeliver later",
    );
  }
  await pool
    .query(STORE, [inst.id, inst.apiBase.replace(/\/+$/, ''), inst.appId, openId])
    .catch((err: unknown) =>
      // By design: this message is still decided with the open_id in hand; the next one fetches again.
      log.warn('lark_bot_identity_store_failed', { installationId: inst.id, error: err }),
    );
  return openId;
}
