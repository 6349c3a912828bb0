import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { expect } from 'vitest';
import worker from '../../workers/index';
import { admin, buildEvent, emu, type TestApp } from '../lark/helpers';
import type { Chat } from './helpers';

/** Issue 33's settings through the admin route, as an operator changes them. */
export async function setSettings(app: TestApp, settings: Record<string, unknown>): Promise<void> {
  const res = await admin(`/${app.installationId}/settings`, {
    method: 'PATCH',
    body: { operator: 'settings-test', settings },
  });
  expect(res.status, await res.clone().text()).toBe(200);
}

export interface EmuCall {
  route: string;
  appId?: string;
  requestedAppId?: string;
  messageId?: string;
  status: number | 'dropped';
}

/** Every Open API call the emulator answered for this app (the token route by the app it asked for). */
export async function appCalls(app: TestApp): Promise<EmuCall[]> {
  const { calls } = await emu<{ calls: EmuCall[] }>('calls');
  return calls.filter((c) => c.appId === app.appId || c.requestedAppId === app.appId);
}

/** The calls of one route about one message (all of them: answered or not). */
export async function callsAbout(route: string, messageId: string): Promise<EmuCall[]> {
  return (await emu<{ calls: EmuCall[] }>(`calls?route=${route}&message_id=${messageId}`)).calls;
}

/** The ledger rows of a Lark message (none when it was never registered). */
export async function ledgerRows(pool: Pool, messageId: string) {
  const { rows } = await pool.query<{ id: string; add_state: string | null; reaction_id: string | null }>(
    'select id, add_state, reaction_id from channel_typing_reaction where source_message_id = $1',
    [messageId],
  );
  return rows;
}

/** The app's Lark calls today as the service counted them (lark_call_counts). */
export async function countedToday(pool: Pool, app: TestApp): Promise<number> {
  const { rows } = await pool.query<{ calls: string }>(
    `select calls from lark_call_counts where app_id = $1 and day = (app_now() at time zone 'UTC')::date`,
    [app.appId],
  );
  return Number(rows[0]?.calls ?? 0);
}

/**
 * A message in a chat (a group one unless said), delivered by the emulator like Lark through
 * the Worker's handler: its Lark id and the webhook's answer, returned once what the webhook
 * left in `waitUntil` (the wake-up and the Typing Add) is done.
 */
export async function deliver(
  chat: Chat,
  message: { text: string; chat_type?: 'p2p' | 'group'; mention_bot?: boolean; mentions?: unknown[] },
): Promise<{ messageId: string; status: number; body: Record<string, unknown> }> {
  const built = await buildEvent(chat.app, {
    message: { chat_type: 'group', chat_id: chat.chatId, ...message },
  });
  const ctx = createExecutionContext();
  const res = await worker.fetch(
    new Request(`http://test/lark/events/${chat.app.installationId}`, {
      method: 'POST',
      headers: built.request.headers,
      body: built.request.body,
    }),
    env,
    ctx,
  );
  const body = (await res.json()) as Record<string, unknown>;
  await waitOnExecutionContext(ctx);
  return { messageId: built.message_id!, status: res.status, body };
}
