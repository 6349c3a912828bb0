import { exports } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { readSettings } from '../../workers/installations/settings';
import {
  engineSuite,
  failedTurn,
  fireDebounce,
  newChat,
  pump,
  repliesTo,
  say,
  stateOf,
  turns,
  untilSettled,
} from '../channel/helpers';
import { uid } from '../helpers/db';
import { installApp } from '../lark/helpers';
import { action, auditOf, BASE, post, signIn } from './helpers';

/**
 * The console's re-run, pause and resume (issue 33 items 4 and 5): the admin routes' functions,
 * confirmed, CSRF-guarded and audited like every console action.
 */
const suite = engineSuite();
const { pool } = suite;

const audit = (operator: string) => auditOf(pool, operator);

describe('console: re-run, pause and resume', { timeout: 90_000 }, () => {
  it('console.turn_rerun: re-runs a failed turn once (a reply under a new uuid); a second try is refused and both are audited', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const { messageId, turn: failed } = await failedTurn(pool, chat, 'fails first');

    const operator = uid('op');
    const s = await signIn(operator);
    expect(s.html).toContain('data-action="turn-rerun"');
    const fields = { installation: app.installationId, turn: failed.delivery_key };
    const done = await action(s, 'turn-rerun', fields);
    expect(done.status).toBe(303);
    expect(done.headers.get('location')).toBe('/console#panel-lark');
    await pump(chat);
    await fireDebounce(pool, chat);
    const again = await untilSettled(pool, chat, 2);
    expect(again).toMatchObject({ outcome: 'delivered', anchor_message_id: messageId });
    const replies = await repliesTo(messageId);
    expect(replies.map((r) => (r as unknown as { reply_uuid: string }).reply_uuid)).toEqual([
      again.delivery_key,
    ]);

    // The inspector offers no second re-run of it.
    const inspected = await exports.default.fetch(
      `${BASE}/console/inspect?installation=${app.installationId}&q=${encodeURIComponent(messageId)}`,
      {
        headers: { cookie: s.cookie },
      },
    );
    const page = await inspected.text();
    expect(page).toContain('a re-run of turn 1');
    expect(page).not.toContain('data-action="turn-rerun"');
    const twice = await action(s, 'turn-rerun', fields);
    expect(twice.status).toBe(409);
    expect(await twice.text()).toContain('data-code="turn_already_rerun"');
    const bad = await action(s, 'turn-rerun', { installation: app.installationId, turn: 'nope' });
    expect(bad.status).toBe(400);
    expect(await audit(operator)).toEqual([
      { action: 'turn-rerun', target: `turn:${failed.delivery_key}`, outcome: 're-run of turn 1 (1 inputs)' },
      { action: 'turn-rerun', target: `turn:${failed.delivery_key}`, outcome: 'refused: turn_already_rerun' },
      { action: 'turn-rerun', target: 'turn:nope', outcome: 'refused: validation_failed' },
    ]);
  });

  it('console.pause_resume: pauses and resumes (answer) through the same functions as the admin routes, audited; CSRF and confirmation guard both', async () => {
    const app = await installApp();
    const operator = uid('op');
    const s = await signIn(operator);
    const installation = { installation: app.installationId };

    // Guards first: no CSRF token, no confirmation: nothing changes (and nothing ran to audit).
    const noCsrf = await post(
      '/console/actions/installation-pause',
      { ...installation, confirm: 'yes' },
      s.cookie,
    );
    expect(noCsrf.status).toBe(403);
    expect(await noCsrf.text()).toContain('data-code="csrf_invalid"');
    const unconfirmed = await post(
      '/console/actions/installation-pause',
      { ...installation, csrf: s.csrf },
      s.cookie,
    );
    expect(unconfirmed.status).toBe(400);
    expect((await readSettings(pool, app.installationId)).paused).toBe('off');

    expect((await action(s, 'installation-pause', installation)).status).toBe(303);
    expect((await readSettings(pool, app.installationId)).paused).toBe('on');
    // While paused the page offers the resume, with its backlog choice.
    const { html } = await signIn(operator);
    const row = html.split('<tr>').find((r) => r.includes(`<td>${app.installationId}</td>`))!;
    expect(row).toContain('data-action="installation-resume"');
    expect(row).toContain('<option value="drop">');

    const chat = newChat(app);
    const m = await say(chat, 'while paused');
    await pump(chat);
    await fireDebounce(pool, chat);
    expect(await turns(pool, chat)).toEqual([]);

    const badBacklog = await action(s, 'installation-resume', { ...installation, backlog: 'maybe' });
    expect(badBacklog.status).toBe(400);
    expect((await action(s, 'installation-resume', { ...installation, backlog: 'answer' })).status).toBe(303);
    expect((await readSettings(pool, app.installationId)).paused).toBe('off');
    await pump(chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'delivered', anchor_message_id: m });
    expect(await repliesTo(m)).toHaveLength(1);
    expect((await stateOf(pool, chat)).pending).toEqual([]);

    expect((await action(s, 'installation-pause', { installation: 'li_doesnotexist' })).status).toBe(404);
    expect(await audit(operator)).toEqual([
      { action: 'installation-pause', target: app.installationId, outcome: 'off -> on' },
      { action: 'installation-resume', target: app.installationId, outcome: 'refused: validation_failed' },
      {
        action: 'installation-resume',
        target: app.installationId,
        outcome: 'on -> off (backlog: answer, 1 conversations)',
      },
      { action: 'installation-pause', target: 'li_doesnotexist', outcome: 'refused: not_found' },
    ]);
  });
});
