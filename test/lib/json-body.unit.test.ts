import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { AppEnv } from '../../workers/context';
import { readJsonBody } from '../../workers/lib/json-body';
import { renderError } from '../../workers/middleware';

const Body = z.strictObject({ name: z.string().min(3) });
const app = new Hono<AppEnv>()
  .post('/required', async (c) => c.json(await readJsonBody(c, Body)))
  .post('/optional', async (c) => c.json(await readJsonBody(c, Body.partial(), { optional: true })))
  .onError(renderError);

async function post(path: string, body: string | undefined, contentType?: string) {
  const headers = contentType ? { 'content-type': contentType } : undefined;
  const res = await app.request(path, { method: 'POST', body, headers });
  return { status: res.status, body: (await res.json()) as { error?: { code: string; details?: unknown } } };
}

describe('the JSON body policy', () => {
  it('accepts JSON with a JSON content type (charset and +json included)', async () => {
    for (const type of [
      'application/json',
      'application/json; charset=utf-8',
      'application/merge-patch+json',
    ])
      expect(await post('/required', '{"name":"abc"}', type)).toEqual({ status: 200, body: { name: 'abc' } });
  });

  it('answers 400 bad_request for bytes that are not JSON or are not sent as JSON', async () => {
    const notJson: [string, string | undefined, string | undefined][] = [
      ['/required', '{not json', 'application/json'],
      ['/required', '{"name":"abc"}', 'text/plain'],
      ['/required', '{"name":"abc"}', undefined],
      ['/required', '', 'application/json'],
      ['/optional', '{"name":"abc"}', 'application/x-www-form-urlencoded'],
    ];
    for (const [path, body, type] of notJson) {
      const res = await post(path, body, type);
      expect(res, `${path} ${type} ${body}`).toMatchObject({
        status: 400,
        body: { error: { code: 'bad_request' } },
      });
    }
  });

  it('answers 400 validation_failed naming the field, never echoing the value', async () => {
    const res = await post('/required', '{"name":"x-secret-x","extra":1}', 'application/json');
    expect(res).toMatchObject({ status: 400, body: { error: { code: 'validation_failed' } } });
    expect(JSON.stringify(res.body)).not.toContain('x-secret-x');
    const short = await post('/required', '{"name":"ab"}', 'application/json');
    expect(short.body.error?.details).toEqual([{ path: ['name'], message: expect.any(String) }]);
  });

  it('reads an empty body as {} when the body is optional', async () => {
    expect(await post('/optional', undefined)).toEqual({ status: 200, body: {} });
    expect(await post('/optional', '', 'application/json')).toEqual({ status: 200, body: {} });
    expect(await post('/optional', '{"name":"abc"}', 'application/json')).toEqual({
      status: 200,
      body: { name: 'abc' },
    });
  });
});
