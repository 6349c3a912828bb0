import { env } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { vi } from 'vitest';
import type { KeyRing } from '../../workers/crypto/sealed';
import { withTx } from '../../workers/db/tx';
import { type Installation, insertInstallation, openInstallation } from '../../workers/installations/store';
import { type Registration, registerInput, type TypingRow } from '../../workers/typing-ledger';
import { advanceDbClock, uid } from '../helpers/db';
import { emu, larkBase } from '../lark/helpers';

export const keys = (): KeyRing => JSON.parse(env.SECRET_KEYS!) as KeyRing;

/** A fresh app in the emulator and its installation row (secrets sealed by the store). */
export async function makeInstallation(pool: Pool, workspaceId = uid('ws')): Promise<Installation> {
  const appId = `cli_${uid('a').replace(/[^A-Za-z0-9]/g, '')}`;
  const appSecret = `secret-${crypto.randomUUID()}`;
  await emu('apps', { app_id: appId, app_secret: appSecret, verification_token: 'vt' });
  const row = await insertInstallation(pool, keys(), {
    workspaceId,
    appId,
    apiBase: larkBase(),
    appSecret,
    verificationToken: 'vt',
  });
  return openInstallation(keys(), row);
}

export async function newMessage(): Promise<string> {
  return (await emu<{ message_id: string }>('messages', { text: 'hi' })).message_id;
}

export interface EmuReaction {
  reaction_id: string;
  operator: { operator_id: string; operator_type: 'app' | 'user' };
  reaction_type: { emoji_type: string };
}

export async function reactionsOn(messageId: string): Promise<EmuReaction[]> {
  return (await emu<{ items: EmuReaction[] }>(`messages/${messageId}/reactions`)).items;
}

export async function typingOf(messageId: string, appId: string): Promise<EmuReaction[]> {
  return (await reactionsOn(messageId)).filter(
    (r) => r.reaction_type.emoji_type === 'Typing' && r.operator.operator_id === appId,
  );
}

/** Registers one input in its own committed transaction, as the webhook does. */
export function register(
  pool: Pool,
  inst: Installation,
  input: { sessionId: string; messageId: string; position: number; revision?: number; createdAtMs?: number },
): Promise<Registration> {
  return withTx(pool, { budgetMs: 3000 }, (tx) =>
    registerInput(tx, keys(), {
      installation: inst,
      sessionId: input.sessionId,
      messageId: input.messageId,
      inputPosition: input.position,
      contextRevision: input.revision ?? 0,
      messageCreatedAtMs: input.createdAtMs ?? Date.now(),
      receivedAtMs: Date.now(),
    }),
  );
}

export async function row(pool: Pool, id: string): Promise<TypingRow> {
  const { rows } = await pool.query<TypingRow>('select * from channel_typing_reaction where id = $1', [id]);
  return rows[0]!;
}

/** Every console line written while the file runs, to prove no credential reaches a log. */
export function captureLogs(): string[] {
  const lines: string[] = [];
  for (const m of ['log', 'warn', 'error', 'info', 'debug'] as const) {
    const orig = console[m].bind(console);
    vi.spyOn(console, m).mockImplementation((...args: unknown[]) => {
      lines.push(args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' '));
      orig(...(args as []));
    });
  }
  return lines;
}

/** Database time and the emulator's clock move together (rate-limit resets, token lifetimes). */
export async function advanceClocks(pool: Pool, ms: number): Promise<void> {
  await advanceDbClock(pool, ms);
  await emu('clock', { advanceMs: ms });
}

/** The row id of a registration that must have registered (fails the test otherwise). */
export function registeredId(r: Registration): string {
  if (r.kind !== 'registered') throw new Error(`not registered: ${r.reason}`);
  return r.id;
}
