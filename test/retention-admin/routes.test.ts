import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testPool } from '../helpers/db';
import {
  admin,
  cleanupStatus,
  closeLegacyContract,
  currentGeneration,
  OPERATOR,
  request,
  scoped,
} from './helpers';

const pool = testPool();

beforeAll(() => closeLegacyContract());
afterAll(() => pool.end());

describe('admin routes reach the retention Worker through RETENTION', () => {
  it('status, enable and stop answer through the service binding; the control row agrees', async () => {
    const status = await admin('GET', '/admin/retention/status');
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({ enabled: false, control: { enabled: false } });

    const enabled = await scoped('POST', '/admin/retention/enable', {
      generation: status.body.control.generation,
      operator: OPERATOR,
    });
    expect(enabled.status).toBe(200);
    expect(enabled.body).toMatchObject({ enabled: true, status: { enabled: true } });
    const { rows } = await pool.query('select generation::int, enabled from private.retention_control');
    expect(rows[0]).toEqual({ generation: status.body.control.generation, enabled: true });

    const stopped = await scoped('POST', '/admin/retention/stop', { operator: OPERATOR });
    expect(stopped.status).toBe(200);
    expect(stopped.body).toMatchObject({ confirmed: true, enabled: false, control: { enabled: false } });
    expect((await cleanupStatus()).control).toEqual({
      generation: stopped.body.stopGeneration,
      enabled: false,
    });

    const page = await admin('GET', '/admin/status');
    expect(page.body.retentionCleanup).toMatchObject({
      enabled: false,
      stopGeneration: stopped.body.stopGeneration,
    });
  });

  it('an enable with a stale generation is 409 conflict naming the current one', async () => {
    const stale = await currentGeneration();
    expect((await scoped('POST', '/admin/retention/stop', { operator: OPERATOR })).status).toBe(200);
    const res = await scoped('POST', '/admin/retention/enable', { generation: stale, operator: OPERATOR });
    expect(res.status).toBe(409);
    expect(res.body.error).toMatchObject({
      code: 'conflict',
      details: { reason: 'generation_changed', generation: await currentGeneration() },
    });
    expect((await cleanupStatus()).enabled).toBe(false);
  });

  it('an enable without the generation is 400 and changes nothing', async () => {
    const res = await scoped('POST', '/admin/retention/enable', { operator: OPERATOR });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('validation_failed');
    expect((await cleanupStatus()).enabled).toBe(false);
  });

  it('retention.enable_numbers_bounded: a generation or budget that is a fraction, negative or past 2^53 is 400, never a 500 (issue 29 hole 2)', async () => {
    const generation = await currentGeneration();
    const bodies = [
      { generation: 1e20 },
      { generation: 2 ** 53 },
      { generation: 1.5 },
      { generation: -1 },
      { generation, dbBatchBudget: 1e20 },
      { generation, dbBatchBudget: 0.5 },
      { generation, workerOpBudget: 2 ** 63 },
    ];
    for (const body of bodies) {
      const res = await scoped('POST', '/admin/retention/enable', { ...body, operator: OPERATOR });
      expect({ body, status: res.status, code: res.body?.error?.code }).toEqual({
        body,
        status: 400,
        code: 'validation_failed',
      });
    }
    expect((await cleanupStatus()).enabled).toBe(false);
  });

  it('every route requires a token', async () => {
    for (const [method, path] of [
      ['POST', '/admin/retention/enable'],
      ['POST', '/admin/retention/stop'],
      ['POST', '/admin/retention/rollback'],
      ['GET', '/admin/retention/status'],
    ] as const) {
      const res = await request(method, path, {
        token: null,
        body: method === 'GET' ? undefined : { generation: 0 },
      });
      expect(res.status).toBe(401);
    }
  });
});
