import { afterAll, describe, expect, it } from 'vitest';
import { testPool } from '../helpers/db';
import { admin, errorCode, installApp } from './helpers';

const pool = testPool(2);
afterAll(() => pool.end());

/** Every setting at its default: what an installation nobody configured reads. */
const DEFAULTS = {
  reply_mode: 'text',
  typing_badge: 'on',
  reply_in_groups: 'always',
  typing_daily_call_budget: 'none',
  failure_notice: 'none',
  paused: 'off',
  recall_reply: 'off',
};

const settingsOf = (id: string) => admin(`/${id}/settings`);
const change = (id: string, body: unknown) => admin(`/${id}/settings`, { method: 'PATCH', body });

async function auditOf(id: string) {
  const { rows } = await pool.query<{ operator: string; action: string; target: string; outcome: string }>(
    `select operator, action, target, outcome from console_audit where target like $1 order by id`,
    [`${id}:%`],
  );
  return rows;
}

async function settingsRows(id: string) {
  const { rows } = await pool.query(`select * from lark_installation_settings where installation_id = $1`, [
    id,
  ]);
  return rows;
}

describe('per-installation settings (issue 34 reply_mode, issue 33 typing_badge, reply_in_groups, typing_daily_call_budget)', () => {
  it('settings.defaults: an installation nobody configured reads every default, and no row exists', async () => {
    const app = await installApp();
    const res = await settingsOf(app.installationId);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ settings: DEFAULTS });
    expect(await settingsRows(app.installationId)).toEqual([]);
  });

  it('settings.change_audited: a change is stored, read back and recorded once with its operator; a repeat records nothing', async () => {
    const app = await installApp();
    const res = await change(app.installationId, {
      operator: 'alice',
      settings: { reply_mode: 'card_stream' },
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      settings: { ...DEFAULTS, reply_mode: 'card_stream' },
      changed: [{ setting: 'reply_mode', from: 'text', to: 'card_stream' }],
    });
    expect(await (await settingsOf(app.installationId)).json()).toEqual({
      settings: { ...DEFAULTS, reply_mode: 'card_stream' },
    });
    const again = await change(app.installationId, {
      operator: 'bob',
      settings: { reply_mode: 'card_stream' },
    });
    expect(((await again.json()) as { changed: unknown[] }).changed).toEqual([]);
    expect(await auditOf(app.installationId)).toEqual([
      {
        operator: 'alice',
        action: 'settings.update',
        target: `${app.installationId}:reply_mode`,
        outcome: 'text -> card_stream',
      },
    ]);
    expect((await settingsRows(app.installationId))[0]).toMatchObject({ updated_by: 'bob' });
  });

  it('settings.issue33_values: typing_badge, reply_in_groups and a budget (a number or none) are stored, read back and audited; another setting keeps its value', async () => {
    const app = await installApp();
    const first = await change(app.installationId, {
      operator: 'alice',
      settings: { typing_badge: 'quiet', reply_in_groups: 'mentioned', typing_daily_call_budget: 5000 },
    });
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({
      settings: {
        ...DEFAULTS,
        typing_badge: 'quiet',
        reply_in_groups: 'mentioned',
        typing_daily_call_budget: 5000,
      },
      changed: [
        { setting: 'typing_badge', from: 'on', to: 'quiet' },
        { setting: 'reply_in_groups', from: 'always', to: 'mentioned' },
        { setting: 'typing_daily_call_budget', from: 'none', to: 5000 },
      ],
    });
    // Back to none: stored as null (bigint column), read back as none; the others stay.
    const second = await change(app.installationId, {
      operator: 'bob',
      settings: { typing_daily_call_budget: 'none', typing_badge: 'off' },
    });
    expect(((await second.json()) as { changed: unknown[] }).changed).toEqual([
      { setting: 'typing_badge', from: 'quiet', to: 'off' },
      { setting: 'typing_daily_call_budget', from: 5000, to: 'none' },
    ]);
    expect(await (await settingsOf(app.installationId)).json()).toEqual({
      settings: { ...DEFAULTS, typing_badge: 'off', reply_in_groups: 'mentioned' },
    });
    expect((await settingsRows(app.installationId))[0]).toMatchObject({ typing_daily_call_budget: null });
    expect(
      (await auditOf(app.installationId)).map((a) => [a.operator, a.target.split(':')[1], a.outcome]),
    ).toEqual([
      ['alice', 'typing_badge', 'on -> quiet'],
      ['alice', 'reply_in_groups', 'always -> mentioned'],
      ['alice', 'typing_daily_call_budget', 'none -> 5000'],
      ['bob', 'typing_badge', 'quiet -> off'],
      ['bob', 'typing_daily_call_budget', '5000 -> none'],
    ]);
  });

  it('settings.recall_reply: on and off are stored, read back and audited with the operator', async () => {
    const app = await installApp();
    const on = await change(app.installationId, { operator: 'carol', settings: { recall_reply: 'on' } });
    expect(on.status).toBe(200);
    expect(await on.json()).toEqual({
      settings: { ...DEFAULTS, recall_reply: 'on' },
      changed: [{ setting: 'recall_reply', from: 'off', to: 'on' }],
    });
    expect(await (await settingsOf(app.installationId)).json()).toEqual({
      settings: { ...DEFAULTS, recall_reply: 'on' },
    });
    expect(
      (await auditOf(app.installationId)).map((a) => [a.operator, a.target.split(':')[1], a.outcome]),
    ).toEqual([['carol', 'recall_reply', 'off -> on']]);
  });

  it('settings.bad_input: unknown settings or values, no operator, no setting at all: 400 and nothing written', async () => {
    const app = await installApp();
    const bad = [
      { operator: 'alice', settings: { reply_mode: 'carrier_pigeon' } },
      { operator: 'alice', settings: { reply_colour: 'blue' } },
      { operator: 'alice', settings: { reply_mode: 'card_stream', reply_colour: 'blue' } },
      { operator: 'alice', settings: {} },
      { settings: { reply_mode: 'card_stream' } },
      { operator: '', settings: { reply_mode: 'card_stream' } },
      { operator: 'alice', settings: { reply_mode: 'card_stream' }, extra: 1 },
      { operator: 'alice', settings: { failure_notice: 'smoke_signal' } },
      // Only the pause and resume routes change it (they serialize against turn starts).
      { operator: 'alice', settings: { paused: 'on' } },
      { operator: 'alice', settings: { typing_badge: 'loud' } },
      { operator: 'alice', settings: { typing_badge: true } },
      { operator: 'alice', settings: { reply_in_groups: 'never' } },
      { operator: 'alice', settings: { typing_daily_call_budget: 0 } },
      { operator: 'alice', settings: { typing_daily_call_budget: -5 } },
      { operator: 'alice', settings: { typing_daily_call_budget: 1.5 } },
      { operator: 'alice', settings: { typing_daily_call_budget: '100' } },
      { operator: 'alice', settings: { typing_daily_call_budget: 1_000_000_001 } },
      { operator: 'alice', settings: { typing_daily_call_budget: null } },
      { operator: 'alice', settings: { typing_badge: 'off', typing_daily_call_budget: 'unlimited' } },
      { operator: 'alice', settings: { recall_reply: 'sometimes' } },
      { operator: 'alice', settings: { recall_reply: true } },
    ];
    for (const body of bad) {
      const res = await change(app.installationId, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(await errorCode(res)).toBe('validation_failed');
    }
    expect(await settingsRows(app.installationId)).toEqual([]);
    expect(await auditOf(app.installationId)).toEqual([]);
  });

  it('settings.unknown_installation: 404 for reads and changes of an installation that does not exist', async () => {
    for (const res of [
      await settingsOf('li_doesnotexist'),
      await change('li_doesnotexist', { operator: 'alice', settings: { reply_mode: 'text' } }),
      await settingsOf('not-an-id'),
    ]) {
      expect(res.status).toBe(404);
      expect(await errorCode(res)).toBe('not_found');
    }
  });

  it('settings.admin_only: the routes need the admin token', async () => {
    const app = await installApp();
    const res = await admin(`/${app.installationId}/settings`, { token: 'wrong' });
    expect(res.status).toBe(401);
  });
});
