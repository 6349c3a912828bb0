import { exports } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { operationStampMs } from '../../workers/reaction-tickets/operation-id';
import { advanceDbClock, setDbClockOffset, testPool } from '../helpers/db';
import { call, DAY_MS, issue, opId, seedWorld, snapshot, ticketFor, tokenFor, type World } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

describe('POST /v1/reaction-tickets', () => {
  it('binds the ticket to actor, operation, normalized intent and an expiry seven days after the operation stamp', async () => {
    const w = await seedWorld();
    const op = opId();
    const res = await issue(w.tokens[0]!, op, {
      messageId: w.messages[0]!,
      emoji: '👍\uFE0F',
      desired: 'present',
    });
    expect(res.status).toBe(201);
    expect(res.body.ticket).toMatch(/^rt1\./);
    expect(res.body.intent).toEqual({ messageId: w.messages[0], emoji: '👍', desired: 'present' });
    // The window runs from the operation's creation stamp (a client-side instant just before issuance).
    const stamp = operationStampMs(op)!;
    expect(Date.parse(res.body.expiresAt)).toBe(Math.min(stamp, Date.parse(res.body.issuedAt)) + 7 * DAY_MS);
    expect(Date.parse(res.body.issuedAt) - stamp).toBeLessThan(60_000);
    const { rows } = await pool.query(
      'select actor_id, operation_id, emoji from private.reaction_tickets where operation_id = $1',
      [op],
    );
    expect(rows).toEqual([{ actor_id: w.actors[0], operation_id: op, emoji: '👍' }]);
  });

  it('a retried issuance returns the same ticket; another intent for the same ID is 409', async () => {
    const w = await seedWorld();
    const op = opId();
    const intent = { messageId: w.messages[0]!, emoji: '🎉', desired: 'present' as const };
    const first = await issue(w.tokens[0]!, op, intent);
    const again = await issue(w.tokens[0]!, op, intent);
    expect(again.status).toBe(200);
    expect(again.body.ticket).toBe(first.body.ticket);
    expect(again.body.replayed).toBe(true);
    const other = await issue(w.tokens[0]!, op, { ...intent, desired: 'absent' });
    expect(other.status).toBe(409);
    expect(other.body.error.code).toBe('intent_mismatch');
  });

  it('missing or invalid bearer tokens are 401; a non-member is 404 like a missing message', async () => {
    const w = await seedWorld();
    const intent = { messageId: w.messages[0]!, emoji: '👍', desired: 'present' as const };
    const none = await call('POST', '/v1/reaction-tickets', { body: { operationId: opId(), ...intent } });
    expect(none.status).toBe(401);
    expect(none.body.error.code).toBe('unauthorized');
    const forged = await issue(`${w.tokens[0]!.slice(0, -4)}AAAA`, opId(), intent);
    expect(forged.status).toBe(401);
    const expired = await issue(
      await tokenFor(w.actors[0]!, { issuedAt: 1_700_000_000, ttlSeconds: 60 }),
      opId(),
      intent,
    );
    expect(expired.status).toBe(401);
    const unknownActor = await issue(await tokenFor('nobody_at_all'), opId(), intent);
    expect(unknownActor.status).toBe(401);
    const outsider = await issue(w.outsiderToken, opId(), intent);
    const missing = await issue(w.tokens[0]!, opId(), { ...intent, messageId: 'no_such_message' });
    expect(outsider.status).toBe(404);
    expect(missing.status).toBe(404);
    expect(outsider.body.error.code).toBe(missing.body.error.code);
  });

  it('malformed bodies are 4xx and write nothing', async () => {
    const w = await seedWorld();
    const before = await snapshot(pool, w.messages[0]!, w.actors[0]!);
    const m = w.messages[0]!;
    const bad = [
      { rawBody: '{not json' },
      { body: { operationId: 'short', messageId: m, emoji: '👍', desired: 'present' } },
      { body: { operationId: opId(), messageId: m, emoji: '', desired: 'present' } },
      { body: { operationId: opId(), messageId: m, emoji: 'a b', desired: 'present' } },
      { body: { operationId: opId(), messageId: m, emoji: '👍', desired: 'maybe' } },
      { body: { operationId: opId(), messageId: m, emoji: '👍', desired: 'present', extra: 1 } },
      { body: { operationId: opId(), messageId: m, emoji: 'x'.repeat(5000), desired: 'present' } },
    ];
    for (const b of bad) {
      const res = await call('POST', '/v1/reaction-tickets', { token: w.tokens[0]!, ...b });
      expect(res.status, JSON.stringify(res.body)).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
      expect(res.body.error.requestId).toBeTruthy();
    }
    const { rows } = await pool.query(
      'select count(*)::int as n from private.reaction_tickets where actor_id = $1',
      [w.actors[0]],
    );
    expect(rows[0].n).toBe(0);
    expect(await snapshot(pool, w.messages[0]!, w.actors[0]!)).toEqual(before);
  });
  it('a body not sent as JSON is 415 unsupported_media_type, malformed JSON 400 bad_request, on every /v1 write; nothing written (issue 29 hole 13)', async () => {
    const w = await seedWorld();
    const m = w.messages[0]!;
    const op = opId();
    const ticket = await ticketFor(w.tokens[0]!, op, { messageId: m, emoji: '👍', desired: 'present' });
    const before = await snapshot(pool, m, w.actors[0]!);
    const intent = { messageId: m, emoji: '👍', desired: 'present' };
    const send = (method: string, path: string, body: string, type?: string) => {
      const headers: Record<string, string> = { authorization: `Bearer ${w.tokens[0]}` };
      if (type) headers['content-type'] = type;
      return exports.default.fetch(`http://test${path}`, { method, headers, body });
    };
    const unsupported = { status: 415, code: 'unsupported_media_type' };
    const malformed = { status: 400, code: 'bad_request' };
    const cases: [string, string, string, string | undefined, typeof malformed][] = [
      [
        'POST',
        '/v1/reaction-tickets',
        JSON.stringify({ operationId: opId(), ...intent }),
        'text/plain',
        unsupported,
      ],
      ['POST', '/v1/reaction-tickets', '{not json', 'application/json', malformed],
      // Must not read as `{}`: that is a retirement without its ticket (the legacy path).
      ['POST', `/v1/reaction-operations/${op}/retire`, JSON.stringify({ ticket }), 'text/plain', unsupported],
      // No Content-Type given: fetch sends a string body as text/plain.
      ['PUT', `/v1/reaction-operations/${op}`, JSON.stringify({ ...intent, ticket }), undefined, unsupported],
      [
        'POST',
        `/v1/messages/${m}/reactions/toggle`,
        JSON.stringify({ emoji: '👍' }),
        'text/plain',
        unsupported,
      ],
    ];
    for (const [method, path, body, type, expected] of cases) {
      const res = await send(method, path, body, type);
      const reply = (await res.json()) as { error: { code: string } };
      expect({ status: res.status, code: reply.error.code }, `${method} ${path} ${type}`).toEqual(expected);
    }
    expect(await snapshot(pool, m, w.actors[0]!)).toEqual(before);
  });
});

/** Issuance for the world's first actor on its first message under tight bounds (`tight`). */
function issuer(w: World, bounds: { maxOutstanding: number; perMinute: number }) {
  const tight = {
    REACTION_TICKET_MAX_OUTSTANDING: String(bounds.maxOutstanding),
    REACTION_TICKET_RATE_PER_MINUTE: String(bounds.perMinute),
  };
  const ask = (op: string, emoji: string) =>
    call('POST', '/v1/reaction-tickets', {
      token: w.tokens[0]!,
      env: tight,
      body: { operationId: op, messageId: w.messages[0]!, emoji, desired: 'present' },
    });
  return { tight, ask };
}

describe('issuance bounds', () => {
  it('over the outstanding bound is 429 quota_exceeded with Retry-After; applying frees a slot', async () => {
    const w = await seedWorld();
    const { tight, ask } = issuer(w, { maxOutstanding: 2, perMinute: 100 });
    const a = opId();
    const first = await ask(a, '1️⃣');
    expect(first.status).toBe(201);
    expect((await ask(opId(), '2️⃣')).status).toBe(201);
    const over = await ask(opId(), '3️⃣');
    expect(over.status).toBe(429);
    expect(over.body.error.code).toBe('quota_exceeded');
    expect(over.body.error.details).toMatchObject({ reason: 'outstanding' });
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // Applying one operation frees its slot: the database no longer counts it as outstanding.
    const applied = await call('PUT', `/v1/reaction-operations/${a}`, {
      token: w.tokens[0]!,
      env: tight,
      body: { ticket: first.body.ticket, messageId: w.messages[0]!, emoji: '1️⃣', desired: 'present' },
    });
    expect(applied.status).toBe(200);
    expect((await ask(opId(), '4️⃣')).status).toBe(201);
    // Another actor of the workspace has its own bound.
    const other = await call('POST', '/v1/reaction-tickets', {
      token: w.tokens[1]!,
      env: tight,
      body: { operationId: opId(), messageId: w.messages[0]!, emoji: '5️⃣', desired: 'present' },
    });
    expect(other.status).toBe(201);
  });

  it('over the issuance rate is 429 quota_exceeded (details.reason "rate") with Retry-After, and nothing is issued; rate_limited is only the request limiter (issue 29 hole 1)', async () => {
    const w = await seedWorld();
    const { ask } = issuer(w, { maxOutstanding: 100, perMinute: 3 });
    const statuses: number[] = [];
    let last: Awaited<ReturnType<typeof call>> | undefined;
    for (let i = 0; i < 4; i++) {
      last = await ask(opId(), `e${i}`);
      statuses.push(last.status);
    }
    expect(statuses).toEqual([201, 201, 201, 429]);
    expect(last!.body.error.code).toBe('quota_exceeded');
    expect(last!.body.error.details).toMatchObject({ reason: 'rate' });
    expect(last!.body.error.details.retryAfterSeconds).toBe(Number(last!.headers.get('retry-after')));
    expect(Number(last!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const { rows } = await pool.query(
      'select count(*)::int as n from private.reaction_tickets where actor_id = $1',
      [w.actors[0]],
    );
    expect(rows[0].n).toBe(3);
  });

  it('retiring frees a slot too, and an expired ticket stops counting without any release', async () => {
    const w = await seedWorld();
    const { tight, ask } = issuer(w, { maxOutstanding: 1, perMinute: 100 });
    const a = opId();
    const first = await ask(a, '1️⃣');
    expect(first.status).toBe(201);
    expect((await ask(opId(), '2️⃣')).status).toBe(429);
    const retired = await call('POST', `/v1/reaction-operations/${a}/retire`, {
      token: w.tokens[0]!,
      env: tight,
      body: { ticket: first.body.ticket },
    });
    expect(retired.status).toBe(200);
    expect((await ask(opId(), '3️⃣')).status).toBe(201);
    expect((await ask(opId(), '4️⃣')).status).toBe(429);
    await advanceDbClock(pool, 7 * DAY_MS + 1000);
    try {
      expect((await ask(opId(), '5️⃣')).status).toBe(201);
    } finally {
      await setDbClockOffset(pool, 0);
    }
  });
});
