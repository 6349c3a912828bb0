/**
 * Typed reads of the emulator's CardKit cards (`/__emulator/cards`, `/__emulator/cardkit`), for
 * the workerd tests (through test/lark/helpers.ts, bound to LARK_API_BASE) and the Node ones.
 * Only fetch: it runs in both.
 */
import type { CardKitConfig, CardView } from '../../emulator/cards';

export type { CardKitConfig, CardView };

async function control<T>(base: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${base}/__emulator/${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`emulator ${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

/** One card: sent or not, streaming mode, element text, accepted/refused/ignored updates. */
export async function readCard(base: string, cardId: string): Promise<CardView> {
  return (await control<{ card: CardView }>(base, `cards/${encodeURIComponent(cardId)}`)).card;
}

/** Cards of an app, or sent as (or in answer to) a message. */
export async function listCards(
  base: string,
  filter: { app_id?: string; message_id?: string } = {},
): Promise<CardView[]> {
  const q = new URLSearchParams(filter as Record<string, string>).toString();
  return (await control<{ items: CardView[] }>(base, `cards${q ? `?${q}` : ''}`)).items;
}

/** Chooses the emulator's answer where Lark's is unconfirmed (emulator/cards.ts); returns them all. */
export function setCardKit(base: string, patch: Partial<CardKitConfig>): Promise<CardKitConfig> {
  return control<CardKitConfig>(base, 'cardkit', patch);
}
