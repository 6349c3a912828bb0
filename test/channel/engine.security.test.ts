import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { setAgentOverride } from '../../workers/agents';
import { MAX_GENERATIONS } from '../../workers/channel/conversation';
import { setDbClockOffset, testPool } from '../helpers/db';
import { buildEvent, installApp, larkBase, submit, type TestApp } from '../lark/helpers';
import { fireDebounce, newChat, pump, untilSettled } from './helpers';

const pool = testPool(4);
let app: TestApp;
const lines: string[] = [];
beforeAll(async () => {
  app = await installApp();
  for (const level of ['log', 'info', 'warn', 'error', 'debug'] as const)
    vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
      lines.push(args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' '));
    });
}, 60_000);
afterEach(async () => {
  setAgentOverride(null);
  await setDbClockOffset(pool, 0);
});
afterAll(async () => {
  vi.restoreAllMocks();
  await pool.end();
});

describe('channel engine secrets', { timeout: 40_000 }, () => {
  it('secrets are absent from every response, log line and engine row, across success and failure', async () => {
    const chat = newChat(app);
    const bodies: string[] = [];
    for (const text of ['hello', 'again']) {
      const built = await buildEvent(app, { message: { text, chat_id: chat.chatId, chat_type: 'group' } });
      const res = await submit(app.installationId, built.request);
      bodies.push(await res.text());
    }
    await pump(chat);
    await fireDebounce(pool, chat);
    await untilSettled(pool, chat, 1);
    // A failing turn too: the agent throws, errors get logged.
    setAgentOverride({
      name: 'broken',
      reply: async () => {
        throw new Error('agent exploded');
      },
    });
    const built = await buildEvent(app, { message: { text: 'fail me', chat_id: chat.chatId } });
    bodies.push(await (await submit(app.installationId, built.request)).text());
    await pump(chat);
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 2, 5000)).toMatchObject({ outcome: 'failed' });

    const { rows } = await pool.query<{ dump: string }>(
      `select concat_ws(' ',
         (select state::text from actor_instances where id = $1),
         (select string_agg(payload::text, ' ') from actor_mailbox where instance_id = $1),
         (select string_agg(concat_ws(' ', args::text, result::text, last_error), ' ')
            from effects where origin_instance_id = $1),
         (select string_agg(t::text, ' ') from channel_turns t where session_id = $1),
         (select string_agg(c::text, ' ') from channel_conversations c where id = $1),
         (select string_agg(m::text, ' ') from lark_inbound_messages m where session_id = $1)) as dump`,
      [chat.sessionId],
    );
    // Positive controls: each source really holds engine data, so the "absent" checks below
    // cannot pass on an empty capture. The failed turn wrote one warning per dead generation.
    expect(rows[0]!.dump).toContain('fail me');
    expect(lines.filter((l) => l.includes('"event":"effects_dead"'))).toHaveLength(MAX_GENERATIONS);
    const everything = [...bodies, ...lines, rows[0]!.dump].join('\n');
    for (const secret of [app.appSecret, app.verificationToken, app.encryptKey!])
      expect(everything).not.toContain(secret);
    // The tenant token the engine used (Lark hands out the same one while it is fresh).
    const token = await fetch(`${larkBase()}/open-apis/auth/v3/tenant_access_token/internal`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ app_id: app.appId, app_secret: app.appSecret }),
    }).then((r) => r.json() as Promise<{ tenant_access_token: string }>);
    expect(token.tenant_access_token).toMatch(/^t-/);
    expect(everything).not.toContain(token.tenant_access_token);
  });
});
