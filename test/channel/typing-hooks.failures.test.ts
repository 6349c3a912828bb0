import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { afterInputAnswered } from '../../workers/channel/typing-hooks';
import { loadConfig } from '../../workers/env';
import { uid } from '../helpers/db';
import { captureLogLines, type LogLine } from '../helpers/logs';
import { emu } from '../lark/helpers';
import { makeInstallation, newMessage, register } from '../typing-ledger/helpers';
import { engineSuite, newChat, say } from './helpers';

const suite = engineSuite();
const { pool } = suite;

/** Bounded poll for a log line written after the webhook answered (waitUntil). */
async function untilLogged(logs: ReturnType<typeof captureLogLines>, event: string): Promise<LogLine[]> {
  for (let i = 0; i < 100 && logs.events(event).length === 0; i++)
    await new Promise((r) => setTimeout(r, 50));
  return logs.events(event);
}

describe('the post-answer Typing Add never fails silently', () => {
  it('Lark refusing the Add (HTTP 500) is logged as typing_add_failed and the badge recorded uncertain', async () => {
    const chat = newChat(suite.app);
    await emu('faults', { route: 'reactions.create', kind: '5xx', status: 500 });
    const logs = captureLogLines();
    let messageId: string;
    let logged: LogLine[];
    try {
      messageId = await say(chat, 'hello');
      logged = await untilLogged(logs, 'typing_add_failed');
    } finally {
      logs.restore();
    }
    const { rows } = await pool.query<{ id: string; add_state: string }>(
      'select id, add_state from channel_typing_reaction where source_message_id = $1',
      [messageId],
    );
    expect(rows).toEqual([{ id: expect.any(String), add_state: 'uncertain' }]);
    expect(logged).toEqual([
      expect.objectContaining({ level: 'warn', rowId: rows[0]!.id, kind: 'retryable', httpStatus: 500 }),
    ]);
  });

  it('a failure the ledger does not handle (a bug: no API host) is logged as typing_add_error; the hook still resolves', async () => {
    const inst = await makeInstallation(pool);
    const messageId = await newMessage();
    const sessionId = uid('s');
    const reg = await register(pool, inst, { sessionId, messageId, position: 1 });
    if (reg.kind !== 'registered') throw new Error(`not registered: ${reg.reason}`);
    const logs = captureLogLines();
    await afterInputAnswered(loadConfig(env), {
      input: {
        sessionId,
        installationId: inst.id,
        workspaceId: inst.workspaceId,
        appId: inst.appId,
        chatId: 'oc_test',
        threadId: null,
        messageId,
        messageCreatedAtMs: Date.now(),
        position: 1,
        contextRevision: 0,
        receivedAtMs: Date.now(),
        installation: { ...inst, apiBase: undefined as unknown as string },
      },
      registration: { sendAdd: true, ledgerId: reg.id },
    }).finally(logs.restore);
    expect(logs.events('typing_add_error')).toEqual([
      expect.objectContaining({
        level: 'error',
        sessionId,
        rowId: reg.id,
        error: expect.objectContaining({ name: 'TypeError' }),
      }),
    ]);
    await pool.query('delete from channel_typing_reaction where id = $1', [reg.id]);
  });
});
