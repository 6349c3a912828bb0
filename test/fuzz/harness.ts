import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import fc from 'fast-check';
import { afterAll, expect, inject, it } from 'vitest';
import worker from '../../workers/index';
import { testPool } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { changedTables, type TableSum, tableSums } from '../helpers/tables';

/**
 * The fuzz suite's harness (issue 16 item 8). Every case is one request through the Worker's
 * own fetch with its own execution context, awaited to the end of its `waitUntil` work, and
 * checked for: no 5xx; no write from a rejected (4xx) request, by row count and row versions
 * of every table (test/helpers/tables.ts); no known secret in the answer or in any log line.
 * `npm test` runs DEFAULT_RUNS cases per route group; `npm run fuzz -- --runs N` runs N.
 */
export const DEFAULT_RUNS = 100;

declare module 'vitest' {
  interface TaskMeta {
    fuzz?: GroupStats;
  }
}

export function fuzzRuns(): number {
  return inject('fuzzRuns') || DEFAULT_RUNS;
}

/**
 * A case that takes this long is hung, not slow: every path under test is bounded far below it
 * (the webhook's statements get 1.5 s, remote calls have their own timeouts). fast-check fails
 * the property at that case, which it prints for replay.
 */
export const CASE_TIMEOUT_MS = 30_000;

/**
 * What a group may spend per case on average before its test times out. Measured (30 Nov 2026,
 * 2 cores, load average 5 to 15 from other work): the costliest group, the signed webhook,
 * averaged 153 ms a case over 10,000 (p50 57, p95 611) and 254 ms over its slowest tenth; 2 s
 * is 8 times that tenth, so only a run that has stopped making progress hits it (a single hung
 * case meets CASE_TIMEOUT_MS first). Speed is not asserted here: the table prints each group's
 * time, and the log its per-tenth means (a cost that grows with the data shows as a rising row).
 */
export const CASE_BUDGET_MS = 2_000;

/** The test timeout of a group: its cases at CASE_BUDGET_MS each, never under 60 s. */
export function fuzzTimeout(): number {
  return Math.max(60_000, fuzzRuns() * CASE_BUDGET_MS);
}

/**
 * fast-check's settings for a group: the run's seed, so `TEST_SEED=<n>` replays a failure.
 * `share`: a group that runs one property per route gives each its share of the cases, so
 * every route is reached however small the run.
 */
export function fcParams(share = 1): fc.Parameters<unknown> {
  return {
    numRuns: Math.max(1, Math.ceil(fuzzRuns() / share)),
    seed: inject('testSeed'),
    endOnFailure: true,
    timeout: CASE_TIMEOUT_MS,
  };
}

export interface GroupStats {
  group: string;
  cases: number;
  s2xx: number;
  s4xx: number;
  s5xx: number;
  /** Anything else (1xx/3xx): none expected. */
  other: number;
  writesFromRejected: number;
  secretsLeaked: number;
  /** Cases per route (method and path template), to show every route was reached. */
  routes: Record<string, number>;
  /** Answers per status and error code (`409 intent_mismatch`), to see how deep cases got. */
  answers: Record<string, number>;
  /** The first few failures, replayable with the printed seed. */
  failures: string[];
  /** Wall time of the group's cases (request and table snapshot), for the table. */
  timing: CaseTiming;
}

/** Milliseconds per case; `snapshotMean` is the part spent reading every table's snapshot. */
export interface CaseTiming {
  totalMs: number;
  p50: number;
  p95: number;
  max: number;
  /** Mean of each tenth of the cases, in order: growth shows a cost that scales with the data. */
  tenths: number[];
  snapshotMean: number;
}

export interface FuzzCase {
  /** The route template it exercises (`PUT /admin/actors/:id`), for coverage. */
  route: string;
  request: Request;
}

/** Every secret value the Worker holds: none may appear in an answer or a log line. */
export function workerSecrets(): string[] {
  const keys = Object.values(JSON.parse(env.SECRET_KEYS!) as Record<string, string>);
  const db = new URL(env.DATABASE_URL!);
  return [
    env.ADMIN_TOKEN!,
    ...(env.RETENTION_ADMIN_TOKEN ? [env.RETENTION_ADMIN_TOKEN] : []),
    env.ACTOR_JWT_SECRET!,
    ...keys,
    env.DATABASE_URL!,
    ...(db.password ? [decodeURIComponent(db.password)] : []),
  ];
}

/** console.log as it was before any capture: progress lines of a long run. */
const print = console.log.bind(console);
/** A long run says where it is every this many cases. */
const PROGRESS_EVERY = 1_000;

export class FuzzGroup {
  readonly stats: GroupStats;
  private last: Record<string, TableSum> | undefined;
  // Quiet: thousands of expected rejections would bury the report; failures print their own line.
  private readonly logs = captureLogLines({ quiet: true });

  constructor(
    group: string,
    private readonly pool: Pool,
    private readonly secrets: string[],
  ) {
    this.stats = {
      group,
      cases: 0,
      s2xx: 0,
      s4xx: 0,
      s5xx: 0,
      other: 0,
      writesFromRejected: 0,
      secretsLeaked: 0,
      routes: {},
      answers: {},
      failures: [],
      timing: { totalMs: 0, p50: 0, p95: 0, max: 0, tenths: [], snapshotMean: 0 },
    };
  }
  private readonly caseMs: number[] = [];
  private snapshotMs = 0;

  /** Sends one case and checks it; the answer's status and body text, for the generator's state. */
  async send({ route, request }: FuzzCase): Promise<{ status: number; text: string }> {
    const s = this.stats;
    const started = performance.now();
    this.last ??= await tableSums(this.pool);
    const before = this.last;
    const described = `${request.method} ${new URL(request.url).pathname}`.slice(0, 200);
    this.logs.clear();
    const ctx = createExecutionContext();
    const res = await worker.fetch(request, env, ctx);
    const text = await res.text();
    await waitOnExecutionContext(ctx);
    const snapshotStarted = performance.now();
    const after = await tableSums(this.pool);
    this.last = after;
    this.snapshotMs += performance.now() - snapshotStarted;

    s.cases += 1;
    s.routes[route] = (s.routes[route] ?? 0) + 1;
    const status = res.status;
    const answer = `${status} ${errorCodeOf(text)}`.trim();
    s.answers[answer] = (s.answers[answer] ?? 0) + 1;
    if (status >= 500) {
      s.s5xx += 1;
      const cause = this.logs.lines.find((l) => l.level === 'error')?.error;
      this.fail(`${status} from ${described}: ${text.slice(0, 200)} ${JSON.stringify(cause ?? {})}`);
    } else if (status >= 400) s.s4xx += 1;
    else if (status >= 200 && status < 300) s.s2xx += 1;
    else s.other += 1;
    if (status >= 400) {
      const changed = changedTables(before, after);
      if (changed.length > 0) {
        s.writesFromRejected += 1;
        this.fail(`${status} from ${described} wrote ${changed.join(', ')}`);
      }
    }
    const seen = [text, ...this.logs.raw].join('\n');
    const leaked = this.secrets.filter((secret) => secret.length >= 8 && seen.includes(secret));
    if (leaked.length > 0) {
      s.secretsLeaked += 1;
      this.fail(`${described}: a secret in the answer or a log line (${leaked.length})`);
    }
    this.caseMs.push(performance.now() - started);
    if (s.cases % PROGRESS_EVERY === 0)
      print(`fuzz ${s.group}: ${s.cases} cases, ${Math.round(sum(this.caseMs) / 1000)} s`);
    return { status, text };
  }

  private fail(line: string): void {
    if (this.stats.failures.length < 10) this.stats.failures.push(line);
  }

  /** The group's verdict, once its cases ran; `routes` must each have been reached. */
  finish(task: { meta: { fuzz?: GroupStats } }, routes: string[]): void {
    this.logs.restore();
    const s = this.stats;
    s.timing = caseTiming(this.caseMs, this.snapshotMs);
    task.meta.fuzz = s;
    const t = s.timing;
    console.log(
      `fuzz ${s.group}: ${s.cases} cases, ${s.s2xx} 2xx, ${s.s4xx} 4xx, ${s.s5xx} 5xx, ` +
        `${s.writesFromRejected} writes from rejected, ${s.secretsLeaked} secrets leaked; ` +
        `${Math.round(t.totalMs / 1000)} s, ms a case p50 ${t.p50} p95 ${t.p95} max ${t.max}, ` +
        `by tenth ${t.tenths.join(' ')}, snapshot ${t.snapshotMean}\n  answers: ` +
        Object.entries(s.answers)
          .sort((a, b) => b[1] - a[1])
          .map(([answer, n]) => `${answer} ×${n}`)
          .join(', ') +
        (s.failures.length ? `\n  ${s.failures.join('\n  ')}` : ''),
    );
    expect(s.failures).toEqual([]);
    expect({
      s5xx: s.s5xx,
      writesFromRejected: s.writesFromRejected,
      secretsLeaked: s.secretsLeaked,
    }).toEqual({
      s5xx: 0,
      writesFromRejected: 0,
      secretsLeaked: 0,
    });
    expect(routes.filter((r) => !s.routes[r])).toEqual([]);
  }
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

export function caseTiming(ms: number[], snapshotMs: number): CaseTiming {
  const sorted = [...ms].sort((a, b) => a - b);
  const at = (q: number) =>
    Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0);
  const tenth = Math.max(1, Math.floor(ms.length / 10));
  const mean = (xs: number[]) => Math.round(sum(xs) / Math.max(1, xs.length));
  return {
    totalMs: Math.round(sum(ms)),
    p50: at(0.5),
    p95: at(0.95),
    max: at(1),
    tenths: Array.from({ length: Math.min(10, ms.length) }, (_, i) =>
      mean(ms.slice(i * tenth, (i + 1) * tenth)),
    ),
    snapshotMean: Math.round(snapshotMs / Math.max(1, ms.length)),
  };
}

/** An error's code, or what a 200 of the webhook did (`duplicate`, `ignored`, `rejected`). */
function errorCodeOf(text: string): string {
  try {
    const body = JSON.parse(text) as Record<string, unknown> & { error?: { code?: unknown } };
    if (body.error) return String(body.error.code);
    return ['duplicate', 'ignored', 'rejected', 'challenge'].find((k) => k in body) ?? '';
  } catch {
    return 'non-json';
  }
}

/** GET /healthz answers 200 with the database up: the service survived the run. */
export async function expectHealthy(): Promise<void> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request('http://test/healthz'), env, ctx);
  await waitOnExecutionContext(ctx);
  expect({ status: res.status, body: await res.json() }).toMatchObject({ status: 200, body: { db: 'ok' } });
}

/** The file's own connections for the harness's table snapshots, ended after its tests. */
export function fuzzPool(): Pool {
  const pool = testPool(2);
  afterAll(() => pool.end());
  return pool;
}

/** A route group's fuzz: its targets (routes), each target's cases, and how a case is sent. */
export interface FuzzPlan<T, C> {
  group: string;
  secrets: string[];
  targets: T[];
  /** The target's name in the report (`METHOD /path`). */
  label: (target: T) => string;
  cases: (target: T) => fc.Arbitrary<C>;
  /** Sends one case through the group (group.send) and checks what the group does not. */
  check: (group: FuzzGroup, c: C, target: T) => Promise<void>;
  /** After every case: the group's own assertions over what its checks collected. */
  after?: () => void;
}

/**
 * The test of one route group: the plan, built when the test runs (after the file's
 * `beforeAll`); every target its share of the cases through one FuzzGroup; the report; and the
 * Worker still healthy after.
 */
export function itFuzzes<T, C>(title: string, pool: Pool, plan: () => FuzzPlan<T, C>): void {
  it(
    title,
    async ({ task }) => {
      const p = plan();
      const group = new FuzzGroup(p.group, pool, p.secrets);
      for (const target of p.targets)
        await fc.assert(
          fc.asyncProperty(p.cases(target), (c) => p.check(group, c, target)),
          fcParams(p.targets.length),
        );
      p.after?.();
      group.finish(task, p.targets.map(p.label));
      await expectHealthy();
    },
    fuzzTimeout(),
  );
}

// ---- arbitraries ----------------------------------------------------------------------

/** Any UTF-16 code unit: lone surrogates and U+0000 included (fc's 'binary' unit has neither). */
const anyUnit = fc.integer({ min: 0, max: 0xffff }).map((n) => String.fromCharCode(n));

/** Strings a careless service mishandles: empty, huge, control, surrogate halves, look-alikes. */
export const nastyString: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    '',
    ' ',
    '\u0000',
    'a\u0000b',
    '\ud800',
    '\udfff',
    'x\ud83d',
    '\ud83d\udc4d',
    '\u202e',
    '\ufeff',
    '%00',
    '../../etc/passwd',
    "' or 1=1 --",
    '"; drop table x; --',
    '<script>',
    '$' + '{x}',
    'null',
    '0',
    '-1',
    '1e309',
    'cli_',
    'li_',
  ),
  fc.string({ unit: anyUnit, maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 20 }),
  fc.integer({ min: 129, max: 30_000 }).map((n) => 'x'.repeat(n)),
);

/** A path segment: a nasty string percent-encoded byte by byte, or raw percent garbage. */
export const nastySegment: fc.Arbitrary<string> = fc.oneof(
  nastyString.map(percentEncode),
  fc.constantFrom('%00', '%ED%A0%80', '%', '%ZZ', '..', '%2F', '%2e%2e', 'a%20b', '%F0%9F'),
);

/** Percent-encodes every byte of `s` as UTF-8 (a lone surrogate becomes U+FFFD, as on the wire). */
export function percentEncode(s: string): string {
  return [...new TextEncoder().encode(s)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
}

/**
 * Numbers a typed SQL parameter chokes on (issue 29 hole 2): fractions, values past int4,
 * int8 and 2^53, negatives, -0, and the extremes a JSON number can hold.
 */
export const nastyNumber: fc.Arbitrary<number> = fc.oneof(
  fc.constantFrom(
    0.5,
    1.5,
    -0.5,
    -0,
    -1,
    1e20,
    -1e20,
    2 ** 31,
    -(2 ** 31) - 1,
    2 ** 53,
    2 ** 63,
    Number.MAX_SAFE_INTEGER + 2,
    Number.MAX_VALUE,
    Number.MIN_VALUE,
    1e308,
  ),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }).map((n) => n + 0.25),
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(Number),
);

/** Any JSON value, strings and numbers nasty. */
export const nastyJson: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    nastyString,
    fc.integer(),
    fc.double(),
    nastyNumber,
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(nastyString, tie('value'), { maxKeys: 4 }),
  ),
})).value;

/** A raw request body: JSON text of `value`, or bytes that are not. */
export function bodyBytes(value: fc.Arbitrary<unknown>): fc.Arbitrary<string | Uint8Array> {
  return fc.oneof(
    { weight: 6, arbitrary: value.map((v) => JSON.stringify(v) ?? 'null') },
    { weight: 1, arbitrary: fc.constantFrom('', '{', '{"a":', 'null', '[]', '"\\ud800"', '{"a":"\\u0000"}') },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }) },
  );
}

export const contentType = fc.oneof(
  { weight: 8, arbitrary: fc.constant('application/json') },
  { weight: 1, arbitrary: fc.constantFrom('text/plain', 'application/x-www-form-urlencoded', '') },
);
