import { afterAll, describe, expect, it } from 'vitest';
import { blockedBehind, testPool, uid } from '../helpers/db';
import { changedTables, tableSums } from '../helpers/tables';
import { admin, buildEvent, emu, errorCode, installApp, submit } from './helpers';

/**
 * Issue 16: installations refuse text Postgres cannot store (item 2) and one Lark app is
 * installed once, in one workspace (item 3; docs/lark.md says why).
 */
const pool = testPool(3);
afterAll(() => pool.end());

const SECRETS = {
  app_secret: 'app-secret-value',
  verification_token: 'vtoken-value',
  encrypt_key: 'ekey-value',
};
const appId = () => `cli_${uid('a').replace(/[^A-Za-z0-9]/g, '')}`;

describe('installations refuse text Postgres cannot store, writing nothing', () => {
  const bad = { nul: 'x\u0000y', 'lone surrogate': 'x\ud800y' };
  for (const [what, text] of Object.entries(bad))
    it(`${what} in workspace_id or any secret → 400 validation_failed (register and rotate)`, async () => {
      const existing = await installApp();
      const before = await tableSums(pool);
      const base = { workspace_id: uid('ws'), app_id: appId(), ...SECRETS };
      for (const field of ['workspace_id', 'app_secret', 'verification_token', 'encrypt_key']) {
        const res = await admin('', { body: { ...base, [field]: text } });
        expect({ field, status: res.status, code: await errorCode(res) }).toEqual({
          field,
          status: 400,
          code: 'validation_failed',
        });
      }
      for (const field of ['app_secret', 'verification_token', 'encrypt_key']) {
        const res = await admin(`/${existing.installationId}/rotate`, { body: { [field]: text } });
        expect({ field, status: res.status, code: await errorCode(res) }).toEqual({
          field,
          status: 400,
          code: 'validation_failed',
        });
      }
      expect(changedTables(before, await tableSums(pool))).toEqual([]);
    });
});

describe('api_base is storable text too (issue 29 hole 12)', () => {
  it('U+0000 or a lone surrogate in api_base → 400 validation_failed on register and rotate, nothing written', async () => {
    const existing = await installApp();
    const before = await tableSums(pool);
    for (const api_base of [
      'https://open.larksuite.com/\u0000',
      'https://open.larksuite.com/a\u0000b',
      'http://127.0.0.1:1/\u0000',
      'https://open.larksuite.com/x\ud800',
      'https://open.larksuite.com?q=\u0000',
    ]) {
      const register = await admin('', {
        body: { workspace_id: uid('ws'), app_id: appId(), ...SECRETS, api_base },
      });
      const rotate = await admin(`/${existing.installationId}/rotate`, { body: { api_base } });
      expect({
        api_base,
        register: [register.status, await errorCode(register)],
        rotate: [rotate.status, await errorCode(rotate)],
      }).toEqual({
        api_base,
        register: [400, 'validation_failed'],
        rotate: [400, 'validation_failed'],
      });
    }
    expect(changedTables(before, await tableSums(pool))).toEqual([]);
  });
});

describe('an installation id that is not one names nothing', () => {
  it('GET, rotate and DELETE of /%00, /li_%00 or a non-li_ id → 404 not_found, nothing written', async () => {
    const before = await tableSums(pool);
    for (const id of ['%00', 'li_a%00', 'x%ED%A0%80', 'not-an-id'])
      for (const [path, init] of [
        [`/${id}`, {}],
        [`/${id}/rotate`, { body: { app_secret: 'x' } }],
        [`/${id}`, { method: 'DELETE' }],
      ] as const) {
        const res = await admin(path, init);
        expect({ path, status: res.status, code: await errorCode(res) }).toEqual({
          path,
          status: 404,
          code: 'not_found',
        });
      }
    expect(changedTables(before, await tableSums(pool))).toEqual([]);
  });
});

describe('one Lark app, one installation', () => {
  it('the same app in a second workspace → 409 conflict, so a delivery replayed to it cannot run twice', async () => {
    const app = await installApp();
    const second = await admin('', {
      body: {
        workspace_id: uid('ws2'),
        app_id: app.appId,
        app_secret: app.appSecret,
        verification_token: app.verificationToken,
        encrypt_key: app.encryptKey,
      },
    });
    expect.soft({ status: second.status, code: await errorCode(second) }).toEqual({
      status: 409,
      code: 'conflict',
    });
    // The replay the issue describes: one signed delivery posted to every installation of the app.
    const built = await buildEvent(app, { message: { text: 'hello once' } });
    const { rows } = await pool.query<{ id: string }>('select id from lark_installations where app_id = $1', [
      app.appId,
    ]);
    for (const { id } of rows) expect((await submit(id, built.request)).status).toBeLessThan(500);
    const inputs = await pool.query('select 1 from lark_inbound_messages where message_id = $1', [
      built.message_id,
    ]);
    expect(inputs.rowCount).toBe(1);
  });

  it('under another api_base too: the app id alone is the key (api_base is operator input)', async () => {
    const app = await installApp();
    const res = await admin('', {
      body: { workspace_id: uid('ws2'), app_id: app.appId, ...SECRETS, api_base: 'https://open.feishu.cn' },
    });
    expect({ status: res.status, code: await errorCode(res) }).toEqual({ status: 409, code: 'conflict' });
  });

  it('two concurrent registrations of one app: the second waits on the first and is refused', async () => {
    const id = appId();
    await emu('apps', { app_id: id, ...SECRETS });
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      await holder.query(
        `insert into lark_installations (id, workspace_id, app_id, api_base, app_secret_sealed, verification_token_sealed)
         values ($1, $2, $3, 'https://open.larksuite.com', 'x', 'x')`,
        [`li_${uid('h').replace(/[^A-Za-z0-9]/g, '')}`, uid('ws1'), id],
      );
      const pid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      const racing = admin('', { body: { workspace_id: uid('ws2'), app_id: id, ...SECRETS } });
      await blockedBehind(pool, pid, 5_000);
      await holder.query('commit');
      const res = await racing;
      expect({ status: res.status, code: await errorCode(res) }).toEqual({ status: 409, code: 'conflict' });
    } finally {
      await holder.query('rollback').catch(() => undefined);
      holder.release();
    }
    const { rows } = await pool.query('select 1 from lark_installations where app_id = $1', [id]);
    expect(rows).toHaveLength(1);
  });
});
