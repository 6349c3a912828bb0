import { env, exports } from 'cloudflare:workers';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { signActorToken } from '../../workers/auth/sign';
import { seedWorld, tokenFor, type World } from '../reaction-tickets/helpers';
import {
  bodyBytes,
  contentType,
  type FuzzCase,
  fuzzPool,
  itFuzzes,
  nastyJson,
  nastyNumber,
  nastySegment,
  nastyString,
  workerSecrets,
} from './harness';

/**
 * Every /v1 operation, read from GET /v1/openapi.json (a new route is fuzzed without editing
 * this file): parameters and bodies generated from their schemas, each value valid, nearly
 * valid or hostile; the actor token valid, a non-member's, expired, forged or missing. Tickets
 * the run is issued are reused by later cases, so writes and retirements are reached too.
 */
const pool = fuzzPool();

// biome-ignore lint/suspicious/noExplicitAny: a JSON Schema fragment of the OpenAPI document
type Schema = any;
interface Operation {
  method: string;
  path: string;
  params: Record<string, Schema>;
  body: Schema | undefined;
}

let world: World;
let doc: Schema;
const tokens: string[] = [];
beforeAll(async () => {
  world = await seedWorld(2, 3);
  doc = await (await exports.default.fetch('http://test/v1/openapi.json')).json();
  tokens.push(
    ...world.tokens,
    world.outsiderToken,
    await tokenFor(world.actors[0]!, { ttlSeconds: -60 }),
    await signActorToken('not-the-secret-0123456789abcdef0123456789', world.actors[0]!),
    await tokenFor('actor_unknown'),
    // Issue 29 hole 2: a NumericDate `iat` that is not a whole number, or is out of range.
    await tokenFor(world.actors[0]!, { issuedAt: Math.floor(Date.now() / 1000) - 30.5 }),
    await tokenFor(world.actors[1]!, { issuedAt: -1e20 }),
  );
}, 60_000);

function operations(): Operation[] {
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Schema>>))
    for (const [method, op] of Object.entries(item)) {
      const params: Record<string, Schema> = {};
      for (const p of op.parameters ?? []) if (p.in === 'path') params[p.name] = p.schema;
      ops.push({
        method: method.toUpperCase(),
        path,
        params,
        body: op.requestBody?.content?.['application/json']?.schema,
      });
    }
  return ops;
}

/** The error codes the document lists for an operation at `status`. */
function listedCodes(op: Operation, status: number): string[] {
  const schema =
    doc.paths[op.path]?.[op.method.toLowerCase()]?.responses?.[String(status)]?.content?.['application/json']
      ?.schema;
  return resolve(schema)?.properties?.error?.properties?.code?.enum ?? [];
}

const resolve = (s: Schema): Schema =>
  s?.$ref ? doc.components.schemas[String(s.$ref).split('/').pop()!] : s;

/** What the run has been issued: later cases write and retire with these. */
const issued: { ticket: string; operationId: string; messageId: string; emoji: string }[] = [];
const ISSUED = Symbol('issued');

/** Values that fit a field by its name, so cases get past validation as often as they fail it. */
function seeds(name: string): fc.Arbitrary<unknown> {
  switch (name) {
    case 'messageId':
      return fc.oneof(
        fc.constantFrom(...world.messages, world.messages[0]!.toUpperCase(), 'msg_unknown'),
        fc.constant(ISSUED),
      );
    case 'operationId':
      return fc.oneof(fc.uuid(), fc.constant(ISSUED));
    case 'ticket':
      return fc.constant(ISSUED);
    case 'emoji':
      return fc.oneof(fc.constantFrom('👍', '❤️', ':tada:', 'x', '👍🏽', '\u2764\ufe0f'), fc.constant(ISSUED));
    default:
      return nastyString;
  }
}

/** An arbitrary for a JSON Schema: the subset the document uses, with hostile variants. */
function fromSchema(raw: Schema, name = ''): fc.Arbitrary<unknown> {
  const s = resolve(raw);
  if (s?.type === 'object') {
    const props = Object.entries((s.properties ?? {}) as Record<string, Schema>);
    const fields = props.map(([k, v]) =>
      fc.option(fromSchema(v, k), { nil: undefined, freq: 10 }).map((value) => [k, value] as const),
    );
    // fc.option's `freq`: one in `freq` is nil. An unknown extra key in one body of twelve.
    const extra = fc.oneof(
      { weight: 11, arbitrary: fc.constant(undefined) },
      { weight: 1, arbitrary: fc.tuple(nastyString, nastyJson) },
    );
    return fc.tuple(fc.tuple(...fields), extra).map(([pairs, more]) => {
      const out: Record<string, unknown> = {};
      for (const [k, v] of pairs) if (v !== undefined) out[k] = v;
      if (more) out[more[0]] = more[1];
      return out;
    });
  }
  if (s?.enum)
    return fc.oneof(
      { weight: 4, arbitrary: fc.constantFrom(...s.enum) },
      { weight: 1, arbitrary: nastyJson },
    );
  if (s?.type === 'string')
    return fc.oneof({ weight: 8, arbitrary: seeds(name) }, { weight: 1, arbitrary: nastyString });
  if (s?.type === 'integer' || s?.type === 'number')
    return fc.oneof(
      { weight: 4, arbitrary: fc.integer({ min: s.minimum ?? -10, max: s.maximum ?? 10_000 }) },
      { weight: 1, arbitrary: nastyNumber },
    );
  return nastyJson;
}

/**
 * Replaces ISSUED with the matching field of a ticket the run was given (picked by `pick`, the
 * same one for every field of a case, so an issued intent can be applied as issued).
 */
function materialize(value: unknown, pick: number, name = ''): unknown {
  if (value === ISSUED) {
    const t = issued.length ? issued[pick % issued.length]! : undefined;
    if (!t) return 'no-ticket-yet';
    return name in t ? t[name as keyof (typeof issued)[number]] : t.operationId;
  }
  if (value && typeof value === 'object' && !Array.isArray(value))
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, materialize(v, pick, k)]));
  return value;
}

function v1Case(op: Operation): fc.Arbitrary<() => FuzzCase> {
  return fc
    .record({
      params: fc.record(
        Object.fromEntries(
          Object.entries(op.params).map(([k, schema]) => [
            k,
            fc.oneof(
              { weight: 8, arbitrary: fromSchema(schema, k) },
              { weight: 1, arbitrary: nastySegment.map((seg) => ({ raw: seg })) },
            ),
          ]),
        ),
      ),
      body: op.body ? bodyBytes(fromSchema(op.body)) : fc.constant(undefined),
      structured: op.body ? fromSchema(op.body) : fc.constant(undefined),
      useStructured: fc.oneof(
        { weight: 3, arbitrary: fc.constant(true) },
        { weight: 1, arbitrary: fc.constant(false) },
      ),
      // Mostly a member's token (the first two), so most cases reach the handler.
      token: fc.option(
        fc.oneof({ weight: 6, arbitrary: fc.constantFrom(0, 1) }, { weight: 2, arbitrary: fc.nat() }),
        {
          nil: undefined,
          freq: 12,
        },
      ),
      auth: fc.oneof(
        { weight: 8, arbitrary: fc.constant('bearer') },
        { weight: 1, arbitrary: fc.constantFrom('bare', 'garbage') },
      ),
      type: contentType,
      pick: fc.nat(),
    })
    .map((c) => () => {
      let path = op.path;
      for (const [k, v] of Object.entries(c.params)) {
        const value = materialize(v, c.pick, k);
        const segment =
          value && typeof value === 'object' && 'raw' in value
            ? String((value as { raw: string }).raw)
            : encodeURIComponent(String(value).replace(/[\ud800-\udfff]/g, '\ufffd')) || '%20';
        path = path.replace(`{${k}}`, segment);
      }
      const headers: Record<string, string> = {};
      const token = c.token === undefined ? undefined : tokens[c.token % tokens.length];
      if (token)
        headers.authorization =
          c.auth === 'bearer' ? `Bearer ${token}` : c.auth === 'bare' ? token : 'Bearer x.y.z';
      if (c.type) headers['content-type'] = c.type;
      const body = c.useStructured
        ? c.structured === undefined
          ? undefined
          : JSON.stringify(materialize(c.structured, c.pick))
        : c.body;
      return {
        route: `${op.method} ${op.path}`,
        request: new Request(`http://test${path}`, { method: op.method, headers, body }),
      };
    });
}

describe('fuzz: every /v1 route of the OpenAPI document', () => {
  // Issue 29 hole 13: every error answered must be one the document lists for its route.
  const unlisted: string[] = [];
  itFuzzes('answers no 5xx, writes nothing when it refuses, leaks no secret, and stays healthy', pool, () => {
    const ops = operations();
    expect(ops.length).toBeGreaterThanOrEqual(5);
    return {
      group: '/v1 (OpenAPI)',
      secrets: workerSecrets(),
      targets: ops,
      label: (o) => `${o.method} ${o.path}`,
      cases: v1Case,
      check: async (group, build, op) => {
        const { status, text } = await group.send(build());
        if (status >= 400 && status !== 500) {
          const code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? '';
          if (!listedCodes(op, status).includes(code) && unlisted.length < 10)
            unlisted.push(`${op.method} ${op.path} ${status} ${code}`);
        }
        if (status === 200 || status === 201) {
          const body = JSON.parse(text) as {
            ticket?: string;
            operationId?: string;
            intent?: { messageId: string; emoji: string };
          };
          if (body.ticket && body.operationId && body.intent && issued.length < 200)
            issued.push({
              ticket: body.ticket,
              operationId: body.operationId,
              messageId: body.intent.messageId,
              emoji: body.intent.emoji,
            });
        }
      },
      after: () => expect(unlisted).toEqual([]),
    };
  });
});
