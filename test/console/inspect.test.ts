import { env, exports } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { engineSuite, failedTurn, newChat, submitAwaitable } from '../channel/helpers';
import { buildEvent, installApp } from '../lark/helpers';
import { BASE, signIn } from './helpers';

/**
 * The conversation inspector (issue 33 items 4 and 5): found by chat id, message id or sender
 * open_id, one conversation's inputs, turns, badges, effects and mailbox messages on one
 * timeline, in the console (with the re-run of a failed turn) and as the admin route's JSON.
 */
const suite = engineSuite();
const { pool } = suite;

const admin = (query: string, token = env.ADMIN_TOKEN) =>
  exports.default.fetch(`${BASE}/admin/lark/conversations?${query}`, {
    headers: { authorization: `Bearer ${token}` },
  });

describe('conversation inspector', { timeout: 90_000 }, () => {
  it('inspect.find_and_timeline: a failed turn is found by chat, message and sender, laid out on one timeline, and offers its re-run', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const secretText = 'a message only its user should read';
    const { messageId, turn: failed } = await failedTurn(pool, chat, secretText);
    const { rows } = await pool.query<{ sender_open_id: string }>(
      'select sender_open_id from lark_inbound_messages where message_id = $1',
      [messageId],
    );
    const sender = rows[0]!.sender_open_id;
    // The user recalls it afterwards: the recall is on the timeline too.
    const recalled = await buildEvent(app, { type: 'recall', message_id: messageId, chat_id: chat.chatId });
    await (await submitAwaitable(app, recalled.request)).afterAnswer;

    for (const [q, via] of [
      [chat.chatId, 'chat'],
      [messageId, 'message'],
      [sender, 'sender'],
    ] as const) {
      const res = await admin(`installation=${app.installationId}&q=${encodeURIComponent(q)}`);
      expect(res.status, q).toBe(200);
      const body = (await res.json()) as {
        matches: { id: string; via: string }[];
        conversation: { id: string } | null;
        timeline: { kind: string; summary: string; detail: Record<string, unknown> }[];
      };
      expect(
        body.matches.map((m) => [m.id, m.via]),
        q,
      ).toContainEqual([chat.sessionId, via]);
      expect(body.conversation?.id).toBe(chat.sessionId);
      const kinds = new Set(body.timeline.map((e) => e.kind));
      for (const k of ['input', 'turn', 'badge', 'effect', 'mailbox', 'recall'])
        expect(kinds, `${q}: ${k}`).toContain(k);
      expect(body.timeline.some((e) => e.kind === 'turn' && e.summary === 'turn 1 failed')).toBe(true);
      expect(body.timeline.some((e) => e.kind === 'effect' && /channel\.reply/.test(e.summary))).toBe(true);
      // What users wrote never leaves the database through the inspector.
      expect(JSON.stringify(body)).not.toContain(secretText);
    }

    const s = await signIn();
    // Another installation's search finds none of it (every search is within one installation).
    const other = await installApp();
    const elsewhere = await admin(`installation=${other.installationId}&q=${encodeURIComponent(messageId)}`);
    expect(((await elsewhere.json()) as { matches: unknown[] }).matches).toEqual([]);

    const page = await exports.default.fetch(
      `${BASE}/console/inspect?installation=${app.installationId}&q=${encodeURIComponent(messageId)}`,
      {
        headers: { cookie: s.cookie },
      },
    );
    expect(page.status).toBe(200);
    const text = await page.text();
    expect(text).toContain('data-testid="inspect-timeline"');
    expect(text).toContain(`value="${failed.delivery_key}"`);
    // Once, on the turn's settled entry (not on its start as well).
    expect(text.split('data-action="turn-rerun"')).toHaveLength(2);
    expect(text).not.toContain(secretText);
    expect(s.html).toContain('href="/console/inspect"');
  });

  it('inspect.bad_input: an unknown id finds nothing; a malformed query is 400 validation_failed; no token is 401', async () => {
    const none = await admin('installation=li_nobody&q=oc_nobody_here');
    expect(none.status).toBe(200);
    expect(await none.json()).toEqual({ matches: [], conversation: null, timeline: [] });
    for (const q of [
      'installation=li_x&q=',
      'installation=li_x&q=has%20space',
      `installation=li_x&q=${'x'.repeat(201)}`,
      'q=oc_no_installation',
      'installation=not-one&q=oc_x',
    ]) {
      const res = await admin(q);
      expect(res.status, q).toBe(400);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('validation_failed');
    }
    expect((await admin('q=oc_x', 'wrong-token-wrong-token-wrong')).status).toBe(401);
    const unsigned = await exports.default.fetch(`${BASE}/console/inspect?q=oc_x`);
    expect(unsigned.status).toBe(401);
    expect(await unsigned.text()).toContain('action="/console/login"');
    const s = await signIn();
    const bad = await exports.default.fetch(`${BASE}/console/inspect?installation=li_x&q=has%20space`, {
      headers: { cookie: s.cookie },
    });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain('data-code="validation_failed"');
  });
});
