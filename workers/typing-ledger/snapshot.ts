import { type KeyRing, seal, unseal } from '../crypto/sealed';
import { ledgerClient } from './client';
import type { Q } from './types';

/**
 * The credentials a row needs to withdraw its own badge, sealed (AES-GCM, versioned keys)
 * and bound to the row, so the badge can be taken off after the installation is rotated or
 * deleted. Never logged: log.ts redacts `snapshot`/`secret` fields, and no caller passes one.
 */
export interface CredentialSnapshot {
  appId: string;
  appSecret: string;
  apiBase: string;
}

export const snapshotBoundTo = (rowId: string) => `channel_typing_reaction:${rowId}:credentials`;

export function sealSnapshot(keys: KeyRing, rowId: string, s: CredentialSnapshot): Promise<string> {
  return seal(keys, JSON.stringify({ a: s.appId, s: s.appSecret, b: s.apiBase }), snapshotBoundTo(rowId));
}

export async function openSnapshot(
  keys: KeyRing,
  rowId: string,
  sealed: string,
): Promise<CredentialSnapshot> {
  const o = JSON.parse(await unseal(keys, sealed, snapshotBoundTo(rowId))) as {
    a: string;
    s: string;
    b: string;
  };
  return { appId: o.a, appSecret: o.s, apiBase: o.b };
}

/**
 * A client speaking with the row's snapshot, not with the installation's current state,
 * behind the durable rate-limit gate read and written through `q`.
 */
export async function clientFor(keys: KeyRing, rowId: string, sealed: string, q: Q, fetchFn?: typeof fetch) {
  const s = await openSnapshot(keys, rowId, sealed);
  return ledgerClient(q, { baseUrl: s.apiBase, appId: s.appId, appSecret: s.appSecret }, fetchFn);
}

export function newRowId(): string {
  return `tr_${crypto.randomUUID().replaceAll('-', '')}`;
}
