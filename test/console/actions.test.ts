import { describe, expect, it } from 'vitest';
import { uid } from '../helpers/db';
import { makeInstallation, typingOf } from '../typing-ledger/helpers';
import { liveRows, maintenanceStub } from '../typing-maintenance/helpers';
import { action, fixtures, page, secretValues, signIn } from './helpers';

/** Every console action: done through the same owner as the admin API, confirmed, and audited. */
const f = fixtures();
const { track } = f;

async function audit(operator: string) {
  const { rows } = await f.pool.query<{
    action: string;
    target: string | null;
    outcome: string;
    request_id: string;
  }>('select action, target, outcome, request_id from console_audit where operator = $1 order by id', [
    operator,
  ]);
  return rows;
}

async function deadLetter(): Promise<string> {
  const instance = uid('console-i');
  await f.pool.query(
    `insert into actor_instances (id, actor_type, actor_key) values ($1, 'console-test', $1)`,
    [instance],
  );
  const { rows } = await f.pool.query<{ id: string }>(
    `insert into actor_mailbox (instance_id, message_key, payload, state, attempts, last_error, dead_at_ms)
     values ($1, 'in:1', '{}'::jsonb, 'dead', 5, 'Error: boom', app_now_ms()) returning id::text`,
    [instance],
  );
  return rows[0]!.id;
}

describe('console actions', () => {
  it('stops and enables the typing maintenance, shows it, and records both with the operator', async () => {
    const operator = uid('op');
    const s = await signIn(operator);
    const before = (await maintenanceStub().status()).stopGeneration;
    const stop = await action(s, 'typing-stop');
    expect(stop.status).toBe(303);
    expect(stop.headers.get('location')).toBe('/console#panel-typing');
    expect(await maintenanceStub().status()).toMatchObject({ enabled: false, stopGeneration: before + 1 });
    expect(await (await page(s.cookie)).text()).toContain(
      'data-testid="typing-state"><span class="badge bad">stopped',
    );
    expect((await action(s, 'typing-enable')).status).toBe(303);
    expect(await maintenanceStub().status()).toMatchObject({ enabled: true, stopGeneration: before + 1 });
    const rows = await audit(operator);
    expect(rows.map((r) => [r.action, r.outcome])).toEqual([
      ['typing-stop', `stopped, generation ${before + 1}`],
      ['typing-enable', `enabled, generation ${before + 1}`],
    ]);
    expect(rows[0]!.request_id.length).toBeGreaterThan(0);
  });

  it('retries the removal of an abandoned badge: the badge is gone and the outcome recorded', async () => {
    const inst = await makeInstallation(f.pool);
    track(inst.workspaceId);
    const [live] = await liveRows(f.pool, inst, 1);
    await f.pool.query(
      `update channel_typing_reaction set abandoned_at = app_now(), credential_snapshot = null, quota_slot = null,
         next_attempt_at = null, retention_outcome = 'expired' where id = $1`,
      [live!.id],
    );
    expect(await typingOf(live!.messageId, inst.appId)).toHaveLength(1);
    const operator = uid('op');
    const s = await signIn(operator);
    expect(s.html).toContain(`name="row" value="${live!.id}"`);
    const res = await action(s, 'badge-remove', { row: live!.id });
    expect(res.status).toBe(303);
    expect(await typingOf(live!.messageId, inst.appId)).toHaveLength(0);
    const [row] = await audit(operator);
    expect(row).toMatchObject({ action: 'badge-remove', target: live!.id });
    expect(row!.outcome).toMatch(/^removed /);
  });

  it('refuses the removal of an unknown row with 404 and records the refusal', async () => {
    const operator = uid('op');
    const s = await signIn(operator);
    const res = await action(s, 'badge-remove', { row: 'no_such_row' });
    expect(res.status).toBe(404);
    expect(await res.text()).toContain('data-code="not_found"');
    expect(await audit(operator)).toMatchObject([
      { action: 'badge-remove', target: 'no_such_row', outcome: 'refused: not_found' },
    ]);
    expect((await action(s, 'badge-remove', { row: 'bad id!' })).status).toBe(400);
  });

  it('requeues a dead-lettered message once: pending again with a fresh attempt count', async () => {
    const id = await deadLetter();
    const operator = uid('op');
    const s = await signIn(operator);
    expect(s.html).toContain(`name="message" value="${id}"`);
    expect((await action(s, 'dead-requeue', { message: id })).status).toBe(303);
    const { rows } = await f.pool.query(
      'select state, attempts, dead_at_ms from actor_mailbox where id = $1',
      [id],
    );
    expect(rows[0]).toMatchObject({ state: 'pending', attempts: 0, dead_at_ms: null });
    expect((await action(s, 'dead-requeue', { message: id })).status).toBe(404);
    expect((await audit(operator)).map((r) => r.outcome)).toEqual(['requeued', 'refused: not_found']);
  });

  it('discards a dead-lettered message, and never a pending one', async () => {
    const id = await deadLetter();
    const pending = await deadLetter();
    await f.pool.query(`update actor_mailbox set state = 'pending', dead_at_ms = null where id = $1`, [
      pending,
    ]);
    const s = await signIn();
    expect((await action(s, 'dead-discard', { message: id })).status).toBe(303);
    expect((await action(s, 'dead-discard', { message: pending })).status).toBe(404);
    const { rows } = await f.pool.query('select id::text from actor_mailbox where id = any($1::bigint[])', [
      [id, pending],
    ]);
    expect(rows.map((r) => r.id)).toEqual([pending]);
  });

  it('stops the retention cleanup with the session, but enables it only with its own credential', async () => {
    const operator = uid('op');
    const s = await signIn(operator);
    expect((await action(s, 'retention-stop')).status).toBe(303);
    const generation = /name="generation" value="(\d+)"/.exec(await (await page(s.cookie)).text())?.[1];
    expect(generation).toBeDefined();
    const without = await action(s, 'retention-enable', { generation: generation! });
    expect(without.status).toBe(403);
    expect(await without.text()).toContain('data-code="forbidden"');
    const wrong = await action(s, 'retention-enable', {
      generation: generation!,
      retention_token: 'x'.repeat(40),
    });
    expect(wrong.status).toBe(403);
    // With the scoped credential the request reaches the cleanup, whose gate is still closed here.
    const { env } = await import('cloudflare:workers');
    const gated = await action(s, 'retention-enable', {
      generation: generation!,
      retention_token: env.RETENTION_ADMIN_TOKEN!,
    });
    expect(gated.status).toBe(412);
    expect((await audit(operator)).map((r) => [r.action, r.outcome.replace(/\d+/, 'N')])).toEqual([
      ['retention-stop', 'stopped, generation N'],
      ['retention-enable', 'refused: forbidden'],
      ['retention-enable', 'refused: forbidden'],
      ['retention-enable', 'refused: precondition_failed'],
    ]);
  });

  it("console.lark_holds_shown: an installation's routes held by a recorded Lark 429 reset are listed with their end; a passed hold is not", async () => {
    const inst = await makeInstallation(f.pool);
    track(inst.workspaceId);
    const { rows } = await f.pool.query<{ api_base: string }>(
      'select api_base from lark_installations where id = $1',
      [inst.id],
    );
    await f.pool.query(
      `insert into lark_rate_limits (api_base, app_id, route, not_before) values
         (rtrim($1, '/'), $2, 'auth.tenant_access_token', app_now() + interval '5 minutes'),
         (rtrim($1, '/'), $2, 'reactions.delete', app_now() - interval '1 second')`,
      [rows[0]!.api_base, inst.appId],
    );
    const html = await (await page((await signIn()).cookie)).text();
    const row = html.split('<tr>').find((r) => r.includes(`<td>${inst.id}</td>`))!;
    expect(row).toMatch(/auth\.tenant_access_token<\/span> until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d/);
    expect(row).not.toContain('reactions.delete');
  });

  it('renders no secret: tokens, key material, app secrets and sealed values stay out of the page', async () => {
    const inst = await makeInstallation(f.pool);
    track(inst.workspaceId);
    const { rows } = await f.pool.query<Record<string, string | null>>(
      'select app_secret_sealed, verification_token_sealed, encrypt_key_sealed from lark_installations where id = $1',
      [inst.id],
    );
    const s = await signIn();
    const html = await (await page(s.cookie)).text();
    expect(html).toContain(inst.id);
    const secrets: [string, string][] = [
      ...secretValues(),
      ['app secret', inst.appSecret],
      ...Object.entries(rows[0]!).flatMap(([k, v]): [string, string][] => (v ? [[k, v]] : [])),
      ['session cookie', s.cookie.split('=')[1]!],
    ];
    for (const [name, value] of secrets)
      expect(html.includes(value), `${name} appears in the console`).toBe(false);
  });
});
