import { env } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { log } from '../../workers/log';
import { testPool } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';

const pool = testPool(2);
afterAll(() => pool.end());

describe('log lines of caught errors', () => {
  it("name a driver error's class and SQLSTATE, not its generic name", async () => {
    const err = await pool.query('select * from no_such_table_here').then(
      () => undefined,
      (e: unknown) => e,
    );
    const logs = captureLogLines();
    try {
      log.error('test_driver_error', { error: err });
    } finally {
      logs.restore();
    }
    expect(logs.events('test_driver_error')).toEqual([
      expect.objectContaining({ error: expect.objectContaining({ name: 'DatabaseError', code: '42P01' }) }),
    ]);
  });

  it("never print the connection string of a driver's client carried by an error event", async () => {
    // What the pool's 'error' event can hand over: not an Error, but an object holding a client.
    const client = await pool.connect();
    const logs = captureLogLines();
    try {
      log.error('test_pool_error', { error: { client } });
    } finally {
      logs.restore();
      client.release();
    }
    const line = JSON.stringify(logs.events('test_pool_error'));
    expect(line).toContain('test_pool_error');
    expect(line).not.toContain(env.DATABASE_URL!);
    // Nor the credentials part of it in any other field (`user:password@`).
    const url = new URL(env.DATABASE_URL!.replace(/^postgres(ql)?:/, 'http:'));
    expect(line).not.toContain(`${url.username}:${url.password}@`);
  });

  it("describe a WebSocket's error event (what the driver emits for a lost connection) by its class and message, not the client pg-pool sets on it", async () => {
    const client = await pool.connect();
    const event = Object.assign(new ErrorEvent('error', { message: 'Network connection lost.' }), { client });
    const logs = captureLogLines();
    try {
      log.error('test_event_error', { error: event });
    } finally {
      logs.restore();
      client.release();
    }
    expect(logs.events('test_event_error')).toEqual([
      expect.objectContaining({ error: { name: 'ErrorEvent', message: 'Network connection lost.' } }),
    ]);
  });
});
