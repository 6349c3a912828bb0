import { type KeyRing, SealedValueError } from '../crypto/sealed';
import { getInstallationRow, openInstallation } from '../installations/store';
import type { LarkClient } from '../lark/client';
import { CREDENTIAL_CODES } from '../lark/errors';
import { log } from '../log';
import { ledgerClient } from './client';
import type { RemoteOutcome } from './remote';
import { clientFor } from './snapshot';
import type { Q } from './types';

/** The row fields that choose a withdrawal's credentials. */
export interface CredentialSource {
  id: string;
  installation_id: string;
  app_id: string;
  credential_snapshot: string | null;
}

/**
 * A client speaking with the row's sealed snapshot; undefined when there is none (erased) or
 * it can never open (sealed under a retired key, or for another row): no retry helps there.
 */
export async function snapshotClient(
  q: Q,
  keys: KeyRing,
  row: CredentialSource,
  fetchFn?: typeof fetch,
): Promise<LarkClient | undefined> {
  if (!row.credential_snapshot) return undefined;
  try {
    return await clientFor(keys, row.id, row.credential_snapshot, q, fetchFn);
  } catch (err) {
    // By design: an unopenable snapshot is "no snapshot". Anything else is a bug and surfaces.
    if (err instanceof SealedValueError) return undefined;
    throw err;
  }
}

/**
 * A client speaking with the installation's CURRENT credentials, only while the installation
 * still exists under the row's installation id AND for the row's own App ID. Another app's
 * installation (in the same workspace, or stored under that id) never speaks for the row: its
 * sweep would look for another operator id, and its secret must not meet this row's badges.
 */
export async function currentClient(
  q: Q,
  keys: KeyRing,
  row: Pick<CredentialSource, 'installation_id' | 'app_id'>,
  fetchFn?: typeof fetch,
): Promise<LarkClient | undefined> {
  const found = await getInstallationRow(q, row.installation_id);
  if (!found || found.app_id !== row.app_id) return undefined;
  const inst = await openInstallation(keys, found);
  return ledgerClient(q, { baseUrl: inst.apiBase, appId: inst.appId, appSecret: inst.appSecret }, fetchFn);
}

/** Lark refused the app's credentials themselves (10014/10015 from the token endpoint). */
export function credentialsRefused(r: { kind: string; code?: number }): boolean {
  return (r.kind === 'permanent' || r.kind === 'retryable') && CREDENTIAL_CODES.has(r.code ?? 0);
}

/**
 * The automatic withdrawal's credentials (maintenance retry, after commit): the snapshot
 * first, as sealed at registration; if Lark refuses its secret (the App Secret was rotated)
 * or it cannot be opened, the installation's current credentials for the same App ID. With
 * the installation gone the snapshot's answer stands: the row keeps its retries until expiry
 * abandons it. A stale snapshot is not re-sealed after a successful fallback
 * (docs/typing-ledger.md "Credentials after rotation").
 */
export async function withRowCredentials<T extends RemoteOutcome | { kind: 'adopted' }>(
  q: Q,
  keys: KeyRing,
  row: CredentialSource,
  fetchFn: typeof fetch | undefined,
  attempt: (client: LarkClient) => Promise<T>,
): Promise<T | RemoteOutcome> {
  const snapshot = await snapshotClient(q, keys, row, fetchFn);
  let first: T | undefined;
  if (snapshot) {
    first = await attempt(snapshot);
    if (!credentialsRefused(first)) return first;
  }
  const current = await currentClient(q, keys, row, fetchFn);
  if (!current) return first ?? { kind: 'permanent', code: 0 };
  const refused = first && 'code' in first ? first.code : 0;
  log.info('typing_withdraw_current_credentials', { rowId: row.id, refusedCode: refused });
  return attempt(current);
}
