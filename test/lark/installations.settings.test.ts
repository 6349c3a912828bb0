import { afterAll, describe, expect, it } from 'vitest';
import { testPool } from '../helpers/db';
import { admin, errorCode, installApp } from './helpers';

const pool = testPool(2);
afterAll(() => pool.end());

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

describe('per-installation settings (issue 34 reply_mode)', () => {
  it('settings.defaults: an installation nobody configured reads every default, and no row exists', async () => {
    const app = await installApp();
    const res = await settingsOf(app.installationId);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      settings: { reply_mode: 'text', failure_notice: 'none', paused: 'off' },
    });
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
      settings: { reply_mode: 'card_stream', failure_notice: 'none', paused: 'off' },
      changed: [{ setting: 'reply_mode', from: 'text', to: 'card_stream' }],
    });
    expect(await (await settingsOf(app.installationId)).json()).toEqual({
      settings: { reply_mode: 'card_stream', failure_notice: 'none', paused: 'off' },
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
