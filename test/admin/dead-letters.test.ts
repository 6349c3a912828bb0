import { runDurableObjectAlarm } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { effectRegistry } from '../../workers/effects/registry';
import { advanceDbClock, testPool } from '../helpers/db';
import { newInstallationId, seedDeadLetters } from '../helpers/dead-letters';

/**
 * Dead letters in bulk through the real Worker (issue 33 items 4 and 5): preview, requeue and
 * discard by installation and death time, paged, idempotent, bound to the preview's range.
 */
const pool = testPool(4);
afterAll(() => pool.end());
const seed = (installation: string, count: number, conversations?: number, agoMs?: number, type?: string) =>
  seedDeadLetters(pool, installation, count, conversations, agoMs, type);

// An actor that takes every message: a requeued one is delivered as soon as its host is woken.
const DELIVERING = 'bulk-delivery-test';
effectRegistry.registerActor<{ seen: number }>({
  type: DELIVERING,
  initialState: () => ({ seen: 0 }),
  handle: (_event, s) => ({ seen: (s?.seen ?? 0) + 1 }),
});

const auth = { authorization: `Bearer ${env.ADMIN_TOKEN}`, 'content-type': 'application/json' };
const OPERATOR = 'ops@example.test';

function post(path: string, body: unknown) {
  return exports.default.fetch(`http://test/admin/effects/dead-letters/${path}`, {
    method: 'POST',
    headers: auth,
    body: JSON.stringify(body),
  });
}

async function ok<T = Record<string, unknown>>(res: Response): Promise<T> {
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return JSON.parse(text) as T;
}

interface Preview {
  installation: string;
  from: string;
  to: string;
  count: number;
  ids: string[];
  cursor: string | null;
}
interface Acted {
  changed: number;
  ids: string[];
  next: string | null;
}

async function states(ids: string[]) {
  const { rows } = await pool.query<{ state: string; n: number }>(
    `select state, count(*)::int as n from actor_mailbox where id = any($1::bigint[]) group by state`,
    [ids],
  );
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}

async function audit(installation: string) {
  const { rows } = await pool.query<{ action: string; outcome: string; operator: string }>(
    `select action, outcome, operator from console_audit where target like $1 || ':%' order by id`,
    [installation],
  );
  return rows;
}

/**
 * Waits until `count` backends of this file's database wait on a lock: the first request
 * behind the holder, the second behind the holder or queued behind the first on the same row
 * (pg_blocking_pids then names the first). Polls; never sleeps a fixed time.
 */
async function waitingOnLocks(count: number, timeoutMs = 10_000) {
  const started = Date.now();
  for (;;) {
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity
        where datname = current_database() and cardinality(pg_blocking_pids(pid)) > 0`,
    );
    if (rows[0]!.n >= count) return;
    if (Date.now() - started > timeoutMs)
      throw new Error(`${rows[0]!.n} of ${count} backends wait on a lock`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const newInstallation = newInstallationId;

/** A preview, then the range as an action takes it back (with the first page's cursor). */
async function previewed(installation: string, extra: Record<string, unknown> = {}) {
  const p = await ok<Preview>(await post('preview', { installation, ...extra }));
  return {
    p,
    range: { operator: OPERATOR, installation, from: p.from, to: p.to, cursor: p.cursor ?? undefined },
  };
}

describe('dead letters in bulk (admin API)', () => {
  it('previews without changing anything: the count, the first page of ids, a closed range', async () => {
    const inst = newInstallation();
    const ids = await seed(inst, 30);
    const other = await seed(newInstallation(), 5);
    const p = await ok<Preview>(await post('preview', { installation: inst, limit: 10 }));
    expect(p.count).toBe(30);
    expect(p.ids).toHaveLength(10);
    expect(p.ids).toEqual(ids.slice(0, 10));
    expect(p.cursor).toMatch(/^0\.0-\d+\.\d+$/);
    expect(p.from).toBe(new Date(0).toISOString());
    expect(Date.parse(p.to)).toBeLessThanOrEqual(Date.now() + 60_000);
    // A range before the deaths counts none of them, and has no page.
    const early = await ok<Preview>(
      await post('preview', { installation: inst, to: new Date(Date.parse(p.to) - 3_600_000).toISOString() }),
    );
    expect(early).toMatchObject({ count: 0, ids: [], cursor: null });
    expect(await states([...ids, ...other])).toEqual({ dead: 35 });
    expect(await audit(inst)).toEqual([]);
  });

  it('requeues more than 1,000 rows in pages of at most 1,000, each once; repeating a page changes nothing', async () => {
    const inst = newInstallation();
    const ids = await seed(inst, 2100);
    const { p, range } = await previewed(inst);
    expect(p.count).toBe(2100);
    expect(p.ids).toHaveLength(1000);
    const first = await ok<Acted>(await post('requeue', range));
    expect(first.changed).toBe(1000);
    expect(first.ids).toEqual(p.ids);
    expect(first.next).not.toBeNull();
    // The same request again: the same page, whose rows are pending now.
    expect(await ok<Acted>(await post('requeue', range))).toMatchObject({ changed: 0, next: first.next });
    const second = await ok<Acted>(await post('requeue', { ...range, cursor: first.next! }));
    expect(second.changed).toBe(1000);
    const third = await ok<Acted>(await post('requeue', { ...range, cursor: second.next! }));
    expect(third.changed).toBe(100);
    expect(third.next).toBeNull();
    expect((await ok<Acted>(await post('requeue', { ...range, cursor: second.next! }))).changed).toBe(0);
    const all = [...first.ids, ...second.ids, ...third.ids];
    expect(new Set(all).size).toBe(2100);
    expect(await states(ids)).toEqual({ pending: 2100 });
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from actor_mailbox
        where id = any($1::bigint[]) and attempts = 0 and dead_at_ms is null`,
      [ids],
    );
    expect(rows[0]!.n).toBe(2100);
    expect((await ok<Preview>(await post('preview', { installation: inst }))).count).toBe(0);
    expect(
      (await audit(inst)).map((a) => [a.action, a.operator, a.outcome.replace(/next .*/, 'next')]),
    ).toEqual([
      ['dead-letters.requeue', OPERATOR, 'requeued 1000, next'],
      ['dead-letters.requeue', OPERATOR, 'requeued 0, next'],
      ['dead-letters.requeue', OPERATOR, 'requeued 1000, next'],
      ['dead-letters.requeue', OPERATOR, 'requeued 100'],
      ['dead-letters.requeue', OPERATOR, 'requeued 0'],
    ]);
  });

  it("is bound to the preview's range: a message that dies after the preview, or dies again, is not touched", async () => {
    const inst = newInstallation();
    const ids = await seed(inst, 3);
    const { p, range } = await previewed(inst);
    expect((await ok<Acted>(await post('requeue', range))).changed).toBe(3);
    await advanceDbClock(pool, 1000);
    // One requeued message dies again, and a new one dies, both after the preview.
    await pool.query(`update actor_mailbox set state = 'dead', dead_at_ms = app_now_ms() where id = $1`, [
      ids[0],
    ]);
    const late = await seed(inst, 1, 1, 0);
    expect((await ok<Acted>(await post('requeue', range))).changed).toBe(0);
    expect((await ok<Acted>(await post('discard', range))).changed).toBe(0);
    expect(await states([ids[0]!, ...late])).toEqual({ dead: 2 });
    // A range that is not closed (its end after now) is not a preview's.
    const open = await post('requeue', {
      ...range,
      to: new Date(Date.parse(p.to) + 3_600_000).toISOString(),
    });
    expect(open.status).toBe(400);
    expect(((await open.json()) as { error: { code: string } }).error.code).toBe('preview_required');
    expect((await ok<Preview>(await post('preview', { installation: inst }))).count).toBe(2);
  });

  it('cuts a hand-made cursor spanning more than 1,000 rows at 1,000, and the next page starts where it stopped', async () => {
    const inst = newInstallation();
    const ids = await seed(inst, 1500);
    const { p, range } = await previewed(inst, { limit: 10 });
    const wide = { ...range, cursor: `0.0-${Date.parse(p.to)}.${'9'.repeat(18)}` };
    const first = await ok<Acted>(await post('requeue', wide));
    expect(first.changed).toBe(1000);
    const second = await ok<Acted>(await post('requeue', { ...range, cursor: first.next! }));
    expect([second.changed, second.next]).toEqual([500, null]);
    expect(await states(ids)).toEqual({ pending: 1500 });
  });

  it('discards only dead rows of the range, once, page by page', async () => {
    const inst = newInstallation();
    const ids = await seed(inst, 12);
    await pool.query(`update actor_mailbox set state = 'pending', dead_at_ms = null where id = $1`, [ids[0]]);
    const { p, range } = await previewed(inst, { limit: 5 });
    expect(p.count).toBe(11);
    let cursor: string | null = p.cursor;
    let total = 0;
    let pages = 0;
    while (cursor && pages < 10) {
      const r = await ok<Acted>(await post('discard', { ...range, cursor, limit: 5 }));
      expect(r.changed).toBeLessThanOrEqual(5);
      total += r.changed;
      pages++;
      cursor = r.next;
    }
    expect([total, pages]).toEqual([11, 3]);
    const { rows } = await pool.query('select id::text from actor_mailbox where id = any($1::bigint[])', [
      ids,
    ]);
    expect(rows.map((r) => r.id)).toEqual([ids[0]]);
    expect((await ok<Acted>(await post('discard', range))).changed).toBe(0);
  });

  it('refuses bad input with 400 and a stable code, writing nothing', async () => {
    const inst = newInstallation();
    const ids = await seed(inst, 3);
    const { p, range } = await previewed(inst);
    const cases: [string, Record<string, unknown>, string][] = [
      ['requeue', { ...range, installation: 'not an installation' }, 'validation_failed'],
      ['preview', { installation: "li_x'; drop table actor_mailbox; --" }, 'validation_failed'],
      ['preview', { installation: 42 }, 'validation_failed'],
      ['requeue', { ...range, from: p.to, to: p.from }, 'range_invalid'],
      ['preview', { installation: inst, from: p.to, to: p.from }, 'range_invalid'],
      ['discard', { ...range, limit: 1001 }, 'validation_failed'],
      ['preview', { installation: inst, limit: 1001 }, 'validation_failed'],
      ['preview', { installation: inst, limit: 0 }, 'validation_failed'],
      ['requeue', { ...range, cursor: 'garbage' }, 'cursor_invalid'],
      ['discard', { ...range, cursor: '1.2.3' }, 'cursor_invalid'],
      // An interval that ends before it starts, or ends outside the range.
      ['requeue', { ...range, cursor: '5.5-1.1' }, 'cursor_invalid'],
      ['requeue', { ...range, cursor: `0.0-${Date.parse(p.to) + 1}.1` }, 'cursor_invalid'],
      ['requeue', { ...range, from: 'yesterday' }, 'validation_failed'],
      ['requeue', { installation: inst, from: p.from, to: p.to, cursor: p.cursor }, 'validation_failed'],
      ['discard', { ...range, to: undefined }, 'preview_required'],
      ['discard', { ...range, cursor: undefined }, 'preview_required'],
      ['requeue', { ...range, extra: 1 }, 'validation_failed'],
    ];
    for (const [path, body, code] of cases) {
      const res = await post(path, body);
      const text = await res.text();
      expect(res.status, `${path} ${JSON.stringify(body)}: ${text}`).toBe(400);
      expect((JSON.parse(text) as { error: { code: string } }).error.code, text).toBe(code);
    }
    const notJson = await exports.default.fetch('http://test/admin/effects/dead-letters/requeue', {
      method: 'POST',
      headers: { ...auth, 'content-type': 'text/plain' },
      body: 'x',
    });
    expect(notJson.status).toBe(400);
    const unauthenticated = await exports.default.fetch('http://test/admin/effects/dead-letters/requeue', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(range),
    });
    expect(unauthenticated.status).toBe(401);
    expect(await states(ids)).toEqual({ dead: 3 });
    expect(await audit(inst)).toEqual([]);
  });

  it('two requeues racing on one page requeue each row once (forced: both wait on a held row lock)', async () => {
    const inst = newInstallation();
    const ids = await seed(inst, 40);
    const { range } = await previewed(inst);
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      // Both requests read the whole page as dead from their snapshots, then wait for row
      // locks: on this one, or on the rows the other has updated.
      await holder.query('select 1 from actor_mailbox where id = any($1::bigint[]) for update', [ids]);
      const a = post('requeue', range);
      const b = post('requeue', range);
      await waitingOnLocks(2);
      await holder.query('commit');
      const [ra, rb] = [await ok<Acted>(await a), await ok<Acted>(await b)];
      expect(ra.changed + rb.changed).toBe(40);
      expect(ra.ids.filter((id) => rb.ids.includes(id))).toEqual([]);
    } finally {
      holder.release();
    }
    expect(await states(ids)).toEqual({ pending: 40 });
  });

  it('requeues or discards one dead letter by id (the console actions dead-requeue and dead-discard), once', async () => {
    const inst = newInstallation();
    const [a, b] = await seed(inst, 2, 1);
    const one = (id: string, verb: string, body: unknown = { operator: OPERATOR }) =>
      post(`${id}/${verb}`, body);
    expect(await ok(await one(a!, 'requeue'))).toMatchObject({ id: a, outcome: 'requeued' });
    const again = await one(a!, 'requeue');
    expect(again.status).toBe(404);
    expect(((await again.json()) as { error: { code: string } }).error.code).toBe('not_found');
    expect((await one(a!, 'discard')).status).toBe(404);
    expect(await ok(await one(b!, 'discard'))).toMatchObject({ id: b, outcome: 'discarded' });
    expect((await one('x1', 'requeue')).status).toBe(400);
    expect((await one(b!, 'requeue', {})).status).toBe(400);
    expect(await states([a!, b!])).toEqual({ pending: 1 });
    const { rows } = await pool.query<{ action: string; target: string; outcome: string }>(
      `select action, target, outcome from console_audit where target = any($1::text[]) order by id`,
      [[`mailbox:${a}`, `mailbox:${b}`]],
    );
    expect(rows.map((r) => [r.action, r.target, r.outcome])).toEqual([
      ['dead-letter.requeue', `mailbox:${a}`, 'requeued'],
      ['dead-letter.discard', `mailbox:${b}`, 'discarded'],
    ]);
  });

  it("wakes the hosts of a requeued page after it committed: each host's alarm is set and delivers", async () => {
    const inst = newInstallation();
    const ids = await seed(inst, 9, 3, 60_000, DELIVERING);
    const { rows } = await pool.query<{ instance_id: string }>(
      'select distinct instance_id from actor_mailbox where id = any($1::bigint[])',
      [ids],
    );
    const hosts = rows.map((r) => actorHostStub(env, r.instance_id));
    const { range } = await previewed(inst);
    expect(await ok(await post('requeue', range))).toMatchObject({ changed: 9, woken: 3 });
    // The wake-ups run after the answer; each one sets its host's alarm (run here: alarms do
    // not fire by themselves in tests), which delivers. No alarm set, nothing delivered.
    const started = Date.now();
    while ((await states(ids)).delivered !== 9) {
      if (Date.now() - started > 10_000)
        throw new Error(`not delivered: ${JSON.stringify(await states(ids))}`);
      for (const h of hosts) await runDurableObjectAlarm(h);
      await new Promise((r) => setTimeout(r, 20));
    }
  });
});
