import type { Pool, PoolClient } from '@neondatabase/serverless';
import { type KeyRing, seal, unseal } from '../crypto/sealed';
import { pgText } from '../lib/pg-text';

type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

/** A row as stored: secrets only in sealed form. */
export interface InstallationRow {
  id: string;
  workspace_id: string;
  app_id: string;
  api_base: string;
  app_secret_sealed: string;
  verification_token_sealed: string;
  encrypt_key_sealed: string | null;
  credential_version: number;
  created_at: Date;
  updated_at: Date;
}

/** An installation with its secrets opened, for the webhook and the Open API client. */
export interface Installation {
  id: string;
  workspaceId: string;
  appId: string;
  apiBase: string;
  appSecret: string;
  verificationToken: string;
  encryptKey: string | null;
  credentialVersion: number;
}

/** What an admin may see: no secret, sealed or not. */
export function publicView(row: InstallationRow) {
  return {
    id: row.id,
    workspace_id: row.workspace_id,
    app_id: row.app_id,
    api_base: row.api_base,
    has_encrypt_key: row.encrypt_key_sealed !== null,
    credential_version: row.credential_version,
    webhook_path: `/lark/events/${row.id}`,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

/** The shape of an installation id (`li_` + 20 characters today); anything else names none. */
export const INSTALLATION_ID = /^li_[A-Za-z0-9]{1,40}$/;

/**
 * An installation's workspace id: the chat platform's own, any text Postgres can store, 1 to
 * 128 UTF-16 units. Every route that takes one (registration, the typing-reaction admin
 * listing) validates it with this, so no id that can name a row is refused and none that
 * cannot reaches a statement.
 */
export const InstallationWorkspaceId = pgText().min(1).max(128);

export const boundTo = (id: string, field: 'app_secret' | 'verification_token' | 'encrypt_key') =>
  `lark_installation:${id}:${field}`;

export interface NewInstallation {
  workspaceId: string;
  appId: string;
  apiBase: string;
  appSecret: string;
  verificationToken: string;
  encryptKey?: string | null;
}

export async function insertInstallation(
  q: Q,
  keys: KeyRing,
  input: NewInstallation,
): Promise<InstallationRow> {
  const id = `li_${crypto.randomUUID().replaceAll('-', '').slice(0, 20)}`;
  const { rows } = await q.query<InstallationRow>(
    `insert into lark_installations
       (id, workspace_id, app_id, api_base, app_secret_sealed, verification_token_sealed, encrypt_key_sealed)
     values ($1, $2, $3, $4, $5, $6, $7)
     returning *`,
    [
      id,
      input.workspaceId,
      input.appId,
      input.apiBase,
      await seal(keys, input.appSecret, boundTo(id, 'app_secret')),
      await seal(keys, input.verificationToken, boundTo(id, 'verification_token')),
      input.encryptKey ? await seal(keys, input.encryptKey, boundTo(id, 'encrypt_key')) : null,
    ],
  );
  return rows[0]!;
}

export interface Rotation {
  apiBase?: string;
  appSecret?: string;
  verificationToken?: string;
  /** A string sets the key, null removes it, undefined keeps it. */
  encryptKey?: string | null;
}

/**
 * Re-seals the given secrets (with the newest key version) and bumps credential_version.
 *
 * A new App Secret or Open API host also makes due at once, in the same statement, every
 * pending Typing withdrawal of this installation's app that Lark last refused for its
 * credentials (10014/10015 from the token endpoint: `credentials_refused`, migration 0120, its
 * own column so a free-text note such as `deferred:429` cannot erase it): those rows
 * back off for hours after repeated refusals, and the rotation is what they were waiting for.
 * The chaos run found it: the secret rotated at Lark, the operator's rotate request lost in a
 * runtime restart, the retry refused with both secrets; after the operator's retry the badge
 * still waited out the backoff. Other rows keep their schedule.
 */
export async function rotateInstallation(
  q: Q,
  keys: KeyRing,
  id: string,
  r: Rotation,
): Promise<InstallationRow | undefined> {
  const { rows } = await q.query<InstallationRow>(
    `with rotated as (
       update lark_installations set
         api_base = coalesce($2, api_base),
         app_secret_sealed = coalesce($3, app_secret_sealed),
         verification_token_sealed = coalesce($4, verification_token_sealed),
         encrypt_key_sealed = case when $5::boolean then $6 else encrypt_key_sealed end,
         credential_version = credential_version + 1,
         updated_at = app_now()
       where id = $1
       returning *),
     refused_now_due as (
       update channel_typing_reaction t
          set next_attempt_at = app_now(), credentials_refused = false, updated_at = app_now()
         from rotated
        where ($2::text is not null or $3::text is not null)
          and t.installation_id = rotated.id and t.app_id = rotated.app_id
          and t.cleaned_at is null and t.abandoned_at is null
          and t.next_attempt_at > app_now()
          and t.credentials_refused)
     select * from rotated`,
    [
      id,
      r.apiBase ?? null,
      r.appSecret ? await seal(keys, r.appSecret, boundTo(id, 'app_secret')) : null,
      r.verificationToken ? await seal(keys, r.verificationToken, boundTo(id, 'verification_token')) : null,
      r.encryptKey !== undefined,
      r.encryptKey ? await seal(keys, r.encryptKey, boundTo(id, 'encrypt_key')) : null,
    ],
  );
  return rows[0];
}

export async function deleteInstallation(q: Q, id: string): Promise<boolean> {
  const { rowCount } = await q.query('delete from lark_installations where id = $1', [id]);
  return (rowCount ?? 0) > 0;
}

export async function getInstallationRow(q: Q, id: string): Promise<InstallationRow | undefined> {
  const { rows } = await q.query<InstallationRow>('select * from lark_installations where id = $1', [id]);
  return rows[0];
}

/** Loads and opens one installation; undefined when it does not exist. */
export async function loadInstallation(q: Q, keys: KeyRing, id: string): Promise<Installation | undefined> {
  const row = await getInstallationRow(q, id);
  return row ? openInstallation(keys, row) : undefined;
}

export async function openInstallation(keys: KeyRing, row: InstallationRow): Promise<Installation> {
  const [appSecret, verificationToken, encryptKey] = await Promise.all([
    unseal(keys, row.app_secret_sealed, boundTo(row.id, 'app_secret')),
    unseal(keys, row.verification_token_sealed, boundTo(row.id, 'verification_token')),
    row.encrypt_key_sealed ? unseal(keys, row.encrypt_key_sealed, boundTo(row.id, 'encrypt_key')) : null,
  ]);
  return {
    id: row.id,
    workspaceId: row.workspace_id,
    appId: row.app_id,
    apiBase: row.api_base,
    appSecret,
    verificationToken,
    encryptKey,
    credentialVersion: row.credential_version,
  };
}
