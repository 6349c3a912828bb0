import { describe, expect, it } from 'vitest';
import { uid } from '../helpers/db';
import { newInstallationId, seedDeadLetters } from '../helpers/dead-letters';
import { action, auditOf, fixtures, post, type Signed, signIn } from './helpers';

/**
 * The console's bulk dead-letter actions: the preview shows the count and changes nothing, the
 * requeue and discard act on the previewed page (the admin routes' function), each confirmed,
 * CSRF-guarded and audited with the operator.
 */
const f = fixtures();

const audit = (operator: string) => auditOf(f.pool, operator);

async function states(ids: string[]) {
  const { rows } = await f.pool.query<{ state: string; n: number }>(
    'select state, count(*)::int as n from actor_mailbox where id = any($1::bigint[]) group by state',
    [ids],
  );
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}

/** The hidden fields of the page's form for `name` (a bulk page's range and cursor), its CSRF token aside. */
function formFields(html: string, name: string): Record<string, string> {
  const form = new RegExp(`<form[^>]*data-action="${name}"[\\s\\S]*?</form>`).exec(html)?.[0];
  if (!form) throw new Error(`no ${name} form on the page`);
  const fields: Record<string, string> = {};
  for (const m of form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g))
    if (m[1] !== 'csrf') fields[m[1]!] = m[2]!.replaceAll('&amp;', '&');
  return fields;
}

async function preview(s: Signed, installation: string) {
  const res = await action(s, 'dead-bulk-preview', { installation });
  const html = await res.text();
  expect(res.status, html).toBe(200);
  return html;
}

describe('console: dead letters in bulk', () => {
  it('previews the count without changing anything, then requeues the previewed page; both audited', async () => {
    const inst = newInstallationId();
    const ids = await seedDeadLetters(f.pool, inst, 7);
    const operator = uid('op');
    const s = await signIn(operator);
    expect(s.html).toContain('data-action="dead-bulk-preview"');
    const html = await preview(s, inst);
    expect(html).toContain('data-testid="bulk-count">7<');
    expect(await states(ids)).toEqual({ dead: 7 });
    const fields = formFields(html, 'dead-bulk-requeue');
    expect(fields).toMatchObject({ installation: inst, cursor: expect.stringMatching(/^0\.0-\d+\.\d+$/) });
    const done = await action(s, 'dead-bulk-requeue', fields);
    const page = await done.text();
    expect(done.status, page).toBe(200);
    expect(page).toContain('data-testid="bulk-changed">7<');
    expect(page).toContain('no page follows');
    expect(await states(ids)).toEqual({ pending: 7 });
    // The same confirmed form again: nothing more.
    expect(await (await action(s, 'dead-bulk-requeue', fields)).text()).toContain(
      'data-testid="bulk-changed">0<',
    );
    const rows = await audit(operator);
    expect(rows.map((r) => [r.action, r.outcome])).toEqual([
      ['dead-bulk-preview', 'preview: 7 dead-lettered'],
      ['dead-bulk-requeue', 'requeued 7'],
      ['dead-bulk-requeue', 'requeued 0'],
    ]);
    expect(rows[1]!.target).toBe(`${inst}:${fields.from}..${fields.to}`);
  });

  it('discards page by page through the next page forms', async () => {
    const inst = newInstallationId();
    const ids = await seedDeadLetters(f.pool, inst, 5);
    const s = await signIn();
    const first = formFields(await preview(s, inst), 'dead-bulk-discard');
    const one = await (await action(s, 'dead-bulk-discard', { ...first, limit: '2' })).text();
    expect(one).toContain('data-testid="bulk-changed">5<');
    expect(await states(ids)).toEqual({});
    // A smaller page: the preview's limit sets its first page, each answer the next one.
    const more = await seedDeadLetters(f.pool, inst, 3, 1, 30_000);
    const small = await action(s, 'dead-bulk-preview', { installation: inst, limit: '2' });
    const p = await small.text();
    const pageOne = await (await action(s, 'dead-bulk-discard', formFields(p, 'dead-bulk-discard'))).text();
    expect(pageOne).toContain('data-testid="bulk-changed">2<');
    const pageTwo = await (
      await action(s, 'dead-bulk-discard', formFields(pageOne, 'dead-bulk-discard'))
    ).text();
    expect(pageTwo).toContain('data-testid="bulk-changed">1<');
    expect(pageTwo).toContain('no page follows');
    expect(await states(more)).toEqual({});
  });

  it('refuses without confirmation, with a stale CSRF token or with bad input, changing nothing', async () => {
    const inst = newInstallationId();
    const ids = await seedDeadLetters(f.pool, inst, 2);
    const operator = uid('op');
    const s = await signIn(operator);
    const fields = formFields(await preview(s, inst), 'dead-bulk-requeue');
    const unconfirmed = await post(
      '/console/actions/dead-bulk-requeue',
      { csrf: s.csrf, ...fields },
      s.cookie,
    );
    expect(unconfirmed.status).toBe(400);
    expect(await unconfirmed.text()).toContain('data-code="confirmation_required"');
    const forged = await post(
      '/console/actions/dead-bulk-requeue',
      { csrf: 'x'.repeat(43), confirm: 'yes', ...fields },
      s.cookie,
    );
    expect(forged.status).toBe(403);
    for (const [bad, code] of [
      [{ ...fields, installation: 'nope' }, 'validation_failed'],
      [{ ...fields, cursor: 'garbage' }, 'cursor_invalid'],
      [{ ...fields, from: fields.to!, to: fields.from! }, 'range_invalid'],
      [{ ...fields, limit: '5000' }, 'validation_failed'],
      [{ installation: inst }, 'preview_required'],
    ] as const) {
      const res = await action(s, 'dead-bulk-requeue', bad);
      expect(res.status).toBe(400);
      expect(await res.text()).toContain(`data-code="${code}"`);
    }
    expect(await states(ids)).toEqual({ dead: 2 });
    expect((await audit(operator)).map((r) => [r.action, r.outcome])).toEqual([
      ['dead-bulk-preview', 'preview: 2 dead-lettered'],
      ['dead-bulk-requeue', 'refused: validation_failed'],
      ['dead-bulk-requeue', 'refused: cursor_invalid'],
      ['dead-bulk-requeue', 'refused: range_invalid'],
      ['dead-bulk-requeue', 'refused: validation_failed'],
      ['dead-bulk-requeue', 'refused: preview_required'],
    ]);
  });
});
