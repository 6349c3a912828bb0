import { describe, expect, it } from 'vitest';
import { type KeyRing, seal, unseal } from '../../workers/crypto/sealed';
import { fromBase64, fromBase64Url, toBase64 } from '../../workers/lib/base64';
import { signTicket, verifyTicket } from '../../workers/reaction-tickets/ticket-token';

/**
 * SECRET_KEYS is one key material per version, used for two purposes: sealing secrets at rest
 * (AES-256-GCM) and the reaction-ticket MAC (HMAC-SHA256). Each purpose uses its own HKDF
 * subkey, never the material itself, and rotation keeps old values opening.
 */
const V1 = 'MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=';
const V2 = 'ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=';
const enc = new TextEncoder();
const BOUND = 'lark_installation:li_legacy:app_secret';

// Made by the code before subkeys (raw key as the AES-GCM key; MAC under HKDF 'reaction-ticket/v1').
const SEALED_BEFORE = 'v1.fIeBOFD6ESsqkIWr.wv8NodnshXpHOvLQueVpZZMzOAFVU+A6czWOpB/1i20eI9IwNyM=';
const TICKET_BEFORE =
  'rt1.1.6f1c2b1e-8a4d-4c1e-9d0a-3b2f1e0c9a77.-o_zKNR5cNo4ZFt9J9JZj4i7BCL95-Tn2VEwbHWNwcw';

/** Opens a sealed value's ciphertext with `keyBytes` as the AES-GCM key, or null. */
async function openWith(keyBytes: Uint8Array, sealed: string, boundTo: string): Promise<string | null> {
  const parts = sealed.split('.');
  const [ivText, ctText] = parts.slice(-2);
  const key = await crypto.subtle.importKey('raw', keyBytes, 'AES-GCM', false, ['decrypt']);
  try {
    const pt = await crypto.subtle.decrypt(
      { name: 'AES-GCM', iv: fromBase64(ivText!), additionalData: enc.encode(boundTo) },
      key,
      fromBase64(ctText!),
    );
    return new TextDecoder().decode(pt);
  } catch {
    return null;
  }
}

async function hkdf(material: string, info: string): Promise<Uint8Array> {
  const base = await crypto.subtle.importKey('raw', fromBase64(material), 'HKDF', false, ['deriveBits']);
  const bits = await crypto.subtle.deriveBits(
    { name: 'HKDF', hash: 'SHA-256', salt: new Uint8Array(0), info: enc.encode(info) },
    base,
    256,
  );
  return new Uint8Array(bits);
}

async function hmac(keyBytes: Uint8Array, data: string): Promise<Uint8Array> {
  const key = await crypto.subtle.importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, [
    'sign',
  ]);
  return new Uint8Array(await crypto.subtle.sign('HMAC', key, enc.encode(data)));
}

describe('SECRET_KEYS: one subkey per purpose', () => {
  it('a new sealed value does not open under the raw key material, only under its seal subkey', async () => {
    const keys: KeyRing = { '1': V1 };
    const sealed = await seal(keys, 'app-secret-value', BOUND);
    expect(await openWith(fromBase64(V1), sealed, BOUND)).toBeNull();
    expect(await openWith(await hkdf(V1, 'sealed-secret/v1'), sealed, BOUND)).toBe('app-secret-value');
    expect(await unseal(keys, sealed, BOUND)).toBe('app-secret-value');
  });

  it('the ticket MAC key is its own subkey: not the raw material, not the seal subkey', async () => {
    const keys: KeyRing = { '1': V1 };
    const id = crypto.randomUUID();
    const token = await signTicket(keys, '1', id);
    const mac = toBase64(fromBase64Url(token.split('.')[3]!));
    expect(toBase64(await hmac(await hkdf(V1, 'reaction-ticket/v1'), id))).toBe(mac);
    expect(toBase64(await hmac(fromBase64(V1), id))).not.toBe(mac);
    expect(toBase64(await hmac(await hkdf(V1, 'sealed-secret/v1'), id))).not.toBe(mac);
    const seal1 = await hkdf(V1, 'sealed-secret/v1');
    const mac1 = await hkdf(V1, 'reaction-ticket/v1');
    expect(toBase64(seal1)).not.toBe(toBase64(mac1));
  });

  it('a value sealed and a ticket signed before subkeys still open and verify', async () => {
    const keys: KeyRing = { '1': V1, '2': V2 };
    expect(await unseal(keys, SEALED_BEFORE, BOUND)).toBe('legacy-app-secret-0123');
    expect(await verifyTicket(keys, TICKET_BEFORE)).toBe('6f1c2b1e-8a4d-4c1e-9d0a-3b2f1e0c9a77');
  });

  it('rotation: values of the old version open and tickets verify after a new version is added; new ones use it', async () => {
    const before: KeyRing = { '1': V1 };
    const after: KeyRing = { '1': V1, '2': V2 };
    const old = await seal(before, 'sealed-under-1', BOUND);
    const id = crypto.randomUUID();
    const oldTicket = await signTicket(before, '1', id);
    expect(await unseal(after, old, BOUND)).toBe('sealed-under-1');
    expect(await verifyTicket(after, oldTicket)).toBe(id);
    const fresh = await seal(after, 'sealed-under-2', BOUND);
    expect(await unseal({ '2': V2 }, fresh, BOUND)).toBe('sealed-under-2');
    await expect(unseal(before, fresh, BOUND)).rejects.toThrow('unknown key version');
    // Retiring version 1 stops its values and tickets: rotation is complete only after re-sealing.
    await expect(unseal({ '2': V2 }, old, BOUND)).rejects.toThrow('unknown key version');
    expect(await verifyTicket({ '2': V2 }, oldTicket)).toBeNull();
  });
});
