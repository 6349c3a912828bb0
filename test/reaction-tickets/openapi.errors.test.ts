import { exports } from 'cloudflare:workers';
import { beforeAll, describe, expect, it } from 'vitest';
import { ERROR_STATUS } from '../../workers/errors';
import { mintOperationId } from '../../workers/reaction-tickets/operation-id';
import { opId, seedWorld, ticketFor, type World } from './helpers';

/**
 * Issue 29 hole 13: GET /v1/openapi.json lists, per route and status, only the error codes that
 * route can answer (it listed every code of each status: Lark, console and typing codes too).
 * The lists are checked against the answers: each error provoked below must be listed for its
 * route and status (the /v1 fuzz group checks every answer it gets the same way).
 */
// biome-ignore lint/suspicious/noExplicitAny: the OpenAPI document
let doc: any;
let w: World;
beforeAll(async () => {
  doc = await (await exports.default.fetch('http://test/v1/openapi.json')).json();
  w = await seedWorld(2, 1);
});

/** The codes the document lists for `method path` at `status`. */
function listed(method: string, path: string, status: number): string[] {
  const op = doc.paths[path]?.[method.toLowerCase()];
  const schema = op?.responses?.[String(status)]?.content?.['application/json']?.schema;
  const resolved = schema?.$ref ? doc.components.schemas[schema.$ref.split('/').pop()] : schema;
  return resolved?.properties?.error?.properties?.code?.enum ?? [];
}

const ROUTES = [
  ['POST', '/v1/reaction-tickets'],
  ['PUT', '/v1/reaction-operations/{operationId}'],
  ['POST', '/v1/reaction-operations/{operationId}/retire'],
  ['GET', '/v1/messages/{messageId}/reactions'],
  ['POST', '/v1/messages/{messageId}/reactions/toggle'],
] as const;

describe('GET /v1/openapi.json lists per route only the error codes it can answer', () => {
  it('openapi.errors_per_route: no Lark, console or typing code; each code under its own status', () => {
    const foreign =
      /^(lark_|typing_)|^(csrf_invalid|confirmation_required|revision_conflict|gone|method_not_allowed|precondition_failed|unknown_reference|timeout|agent_failed|agent_timeout|agent_stream_invalid|forbidden)$/;
    const seen: string[] = [];
    for (const [method, path] of ROUTES) {
      const responses = doc.paths[path][method.toLowerCase()].responses;
      for (const status of Object.keys(responses).filter((s) => Number(s) >= 400))
        for (const code of listed(method, path, Number(status))) {
          if (foreign.test(code)) seen.push(`${method} ${path} ${status}: ${code}`);
          expect(ERROR_STATUS[code as keyof typeof ERROR_STATUS], code).toBe(Number(status));
        }
    }
    expect(seen).toEqual([]);
    // Route-specific codes are not on routes that cannot answer them.
    expect(listed('GET', '/v1/messages/{messageId}/reactions', 403)).toEqual([]);
    expect(listed('GET', '/v1/messages/{messageId}/reactions', 413)).toEqual([]);
    expect(listed('POST', '/v1/reaction-tickets', 403)).toEqual([]);
    expect(listed('POST', '/v1/reaction-tickets', 429).sort()).toEqual(['quota_exceeded', 'rate_limited']);
    expect(listed('PUT', '/v1/reaction-operations/{operationId}', 429)).toEqual(['rate_limited']);
  });

  it('openapi.errors_match_answers: every error provoked on every route is listed for it', async () => {
    const token = w.tokens[0]!;
    const m = w.messages[0]!;
    const intent = { messageId: m, emoji: '👍', desired: 'present' };
    const op = opId();
    const ticket = await ticketFor(token, op, intent as never);
    const paths = {
      issue: '/v1/reaction-tickets',
      write: `/v1/reaction-operations/${op}`,
      retire: `/v1/reaction-operations/${op}/retire`,
      read: `/v1/messages/${m}/reactions`,
      toggle: `/v1/messages/${m}/reactions/toggle`,
    };
    const route: Record<keyof typeof paths, readonly [string, string]> = {
      issue: ROUTES[0],
      write: ROUTES[1],
      retire: ROUTES[2],
      read: ROUTES[3],
      toggle: ROUTES[4],
    };
    type Case = [keyof typeof paths, { auth?: string | null; type?: string; body?: string; path?: string }];
    const json = (v: unknown) => JSON.stringify(v);
    const cases: Case[] = [
      ...(Object.keys(paths) as (keyof typeof paths)[]).map((k): Case => [k, { auth: null }]),
      ...(['issue', 'write', 'retire', 'toggle'] as const).flatMap((k): Case[] => [
        [k, { type: 'text/plain', body: '{}' }],
        [k, { body: '{' }],
        [k, { body: json({ x: 1 }) }],
        [k, { body: json({ pad: 'x'.repeat(5000) }) }],
      ]),
      ['issue', { body: json({ ...intent, operationId: op, emoji: '❤️' }) }],
      ['issue', { body: json({ ...intent, operationId: opId(8 * 86_400_000) }) }],
      ['issue', { body: json({ ...intent, operationId: mintOperationId(Date.now() + 3_600_000) }) }],
      ['issue', { body: json({ ...intent, messageId: 'msg_none', operationId: opId() }) }],
      ['write', { body: json({ ...intent, ticket: 'rt1.1.forged.forged' }) }],
      ['write', { body: json({ ...intent, emoji: '❤️', ticket }) }],
      ['write', { body: json(intent) }],
      ['retire', { body: json({ ticket: 'rt1.1.forged.forged' }) }],
      ['read', { path: '/v1/messages/msg_none/reactions' }],
      ['toggle', { path: '/v1/messages/msg_none/reactions/toggle', body: json({ emoji: '👍' }) }],
    ];
    const unlisted: string[] = [];
    let errors = 0;
    for (const [name, c] of cases) {
      const [method, path] = route[name];
      const headers: Record<string, string> = { 'content-type': c.type ?? 'application/json' };
      if (c.auth !== null) headers.authorization = `Bearer ${c.auth ?? token}`;
      const res = await exports.default.fetch(`http://test${c.path ?? paths[name]}`, {
        method,
        headers,
        body: method === 'GET' ? undefined : (c.body ?? '{}'),
      });
      if (res.status < 400) continue;
      errors += 1;
      const code = ((await res.json()) as { error: { code: string } }).error.code;
      if (!listed(method, path, res.status).includes(code))
        unlisted.push(`${method} ${path} ${res.status} ${code} (${JSON.stringify(c).slice(0, 80)})`);
    }
    expect(unlisted).toEqual([]);
    expect(errors).toBeGreaterThanOrEqual(cases.length - 2);
  });
});
