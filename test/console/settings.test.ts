import { describe, expect, it } from 'vitest';
import { uid } from '../helpers/db';
import { admin } from '../lark/helpers';
import { makeInstallation } from '../typing-ledger/helpers';
import { action, auditOf, fixtures, page, signIn } from './helpers';

/** Issue 33 item 1: each installation's settings on the console, and the confirmed, audited change. */
const f = fixtures();
const { track } = f;

const rowOf = (html: string, id: string) => html.split('<tr>').find((r) => r.includes(`<td>${id}</td>`))!;
const shown = (row: string, setting: string) =>
  new RegExp(`data-setting="${setting}">${setting} <b>([^<]*)</b>`).exec(row)?.[1];

const audit = (operator: string) => auditOf(f.pool, operator);

describe('console: installation settings', () => {
  it('console.settings_shown: every setting of each installation is shown (defaults without a row), with the app’s Lark calls today', async () => {
    const inst = await makeInstallation(f.pool);
    track(inst.workspaceId);
    const { rows } = await f.pool.query<{ api_base: string }>(
      'select api_base from lark_installations where id = $1',
      [inst.id],
    );
    await f.pool.query(
      `insert into lark_call_counts (api_base, app_id, day, calls)
       values (rtrim($1, '/'), $2, (app_now() at time zone 'UTC')::date, 42),
              (rtrim($1, '/'), $2, (app_now() at time zone 'UTC')::date - 1, 7)`,
      [rows[0]!.api_base, inst.appId],
    );
    const s = await signIn();
    let row = rowOf(s.html, inst.id);
    expect(
      ['reply_mode', 'typing_badge', 'reply_in_groups', 'typing_daily_call_budget'].map((n) => shown(row, n)),
    ).toEqual(['text', 'on', 'always', 'none']);
    expect(row).toContain('<td class="num">42</td>');
    const res = await admin(`/${inst.id}/settings`, {
      method: 'PATCH',
      body: { operator: 'api', settings: { typing_badge: 'quiet', typing_daily_call_budget: 900 } },
    });
    expect(res.status).toBe(200);
    row = rowOf(await (await page(s.cookie)).text(), inst.id);
    expect(shown(row, 'typing_badge')).toBe('quiet');
    expect(shown(row, 'typing_daily_call_budget')).toBe('900');
  });

  it('console.settings_change: a confirmed change is stored, read back by the admin API and recorded with the operator; a bad value is 400 with nothing written and the refusal recorded', async () => {
    const inst = await makeInstallation(f.pool);
    track(inst.workspaceId);
    const operator = uid('op');
    const s = await signIn(operator);
    const done = await action(s, 'settings-update', {
      installation: inst.id,
      setting: 'reply_in_groups',
      value: 'mentioned',
    });
    expect(done.status).toBe(303);
    expect(done.headers.get('location')).toBe('/console#panel-lark');
    const budget = await action(s, 'settings-update', {
      installation: inst.id,
      setting: 'typing_daily_call_budget',
      value: '2500',
    });
    expect(budget.status).toBe(303);
    const read = await admin(`/${inst.id}/settings`);
    expect(((await read.json()) as { settings: unknown }).settings).toMatchObject({
      reply_in_groups: 'mentioned',
      typing_daily_call_budget: 2500,
    });
    for (const [setting, value] of [
      ['typing_badge', 'loud'],
      ['typing_daily_call_budget', '0'],
      ['no_such_setting', 'on'],
      // Only the pause and resume routes change it.
      ['paused', 'on'],
    ] as const) {
      const bad = await action(s, 'settings-update', { installation: inst.id, setting, value });
      expect(bad.status, `${setting}=${value}`).toBe(400);
      expect(await bad.text()).toContain('data-code="validation_failed"');
    }
    const unknown = await action(s, 'settings-update', {
      installation: 'li_doesnotexist',
      setting: 'typing_badge',
      value: 'off',
    });
    expect(unknown.status).toBe(404);
    expect(((await (await admin(`/${inst.id}/settings`)).json()) as { settings: unknown }).settings).toEqual({
      reply_mode: 'text',
      typing_badge: 'on',
      reply_in_groups: 'mentioned',
      typing_daily_call_budget: 2500,
      failure_notice: 'none',
      paused: 'off',
      recall_reply: 'off',
    });
    expect(await audit(operator)).toEqual([
      { action: 'settings-update', target: `${inst.id}:reply_in_groups`, outcome: 'always -> mentioned' },
      { action: 'settings-update', target: `${inst.id}:typing_daily_call_budget`, outcome: 'none -> 2500' },
      { action: 'settings-update', target: inst.id, outcome: 'refused: validation_failed' },
      { action: 'settings-update', target: inst.id, outcome: 'refused: validation_failed' },
      { action: 'settings-update', target: inst.id, outcome: 'refused: validation_failed' },
      { action: 'settings-update', target: inst.id, outcome: 'refused: validation_failed' },
      { action: 'settings-update', target: 'li_doesnotexist', outcome: 'refused: not_found' },
    ]);
  });
});
