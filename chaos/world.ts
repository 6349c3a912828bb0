import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { type LarkEmulator, startLarkEmulator } from '../emulator/server';
import { AGENT_SECRET, type ChaosAgent, startChaosAgent } from './agent';
import { type DbFaults, startDbFaults } from './db-faults';
import { type Runtime, startRuntime } from './runtime';
import type { ChaosStack } from './stack';
import { Trace } from './trace';

/** The secrets of every chaos runtime (throwaway, like the test harness's). */
export const SECRETS = {
  ADMIN_TOKEN: 'chaos-admin-token-0123456789abcdef',
  RETENTION_ADMIN_TOKEN: 'chaos-retention-admin-token-fedcba987654',
  SECRET_KEYS: JSON.stringify({ '1': 'MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=' }),
  ACTOR_JWT_SECRET: 'chaos-actor-jwt-secret-0123456789abcdef012345',
};

/** One answer the workload got, for the 5xx invariant and the report. */
export interface Answer {
  step: number | null;
  what: string;
  status: number | 'lost';
  code?: string;
  /** A database fault or a runtime restart overlapped the request. */
  underFault: boolean;
}

export interface LogLine {
  level?: string;
  event?: string;
  [k: string]: unknown;
}

/**
 * Everything one schedule runs against: its own database (a template copy with the test
 * clock and the audit), its own Lark emulator, its own database bridge with fault hooks, and
 * the runtime(s): a primary, restarted at will, and an optional second replica on the same
 * database. Requests go to the replica on every other call while it runs.
 */
export class World {
  readonly trace = new Trace();
  readonly answers: Answer[] = [];
  readonly logs: LogLine[] = [];
  /** Faults injected, by kind (the report's columns). */
  readonly faultCounts = new Map<string, number>();
  primary!: Runtime;
  replica: Runtime | null = null;
  db!: pg.Pool;
  lark!: LarkEmulator;
  /** The streaming agent every runtime of the schedule asks (chaos/agent.ts). */
  agent!: ChaosAgent;
  dbFaults!: DbFaults;
  databaseUrl!: string;
  /** Restarts and cuts so far: a request that saw this change was under a fault. */
  disruptions = 0;
  private persistDir!: string;
  private persistGen = 0;
  /** Durable Object storage directories of this schedule's runtimes, removed at the end. */
  private readonly dirs: string[] = [];
  private calls = 0;
  private restarting: Promise<void> | null = null;
  /** The release the runtimes run: this tree's, or the previous one (the "mixed versions" fault). */
  version: 'new' | 'old' = 'new';

  constructor(
    readonly stack: ChaosStack,
    readonly name: string,
  ) {}

  count(kind: string): void {
    this.faultCounts.set(kind, (this.faultCounts.get(kind) ?? 0) + 1);
  }

  async start(): Promise<void> {
    this.databaseUrl = await this.stack.createDatabase(this.name);
    this.db = new pg.Pool({ connectionString: this.databaseUrl, max: 4, statement_timeout: 10_000 });
    // A pooled side connection cut by a fault is replaced; its error is not the schedule's.
    this.db.on('error', () => undefined);
    this.lark = await startLarkEmulator({ rateLimits: false });
    this.agent = await startChaosAgent();
    this.dbFaults = await startDbFaults(this.databaseUrl);
    this.persistDir = join(this.stack.tempDir, `${this.name}-do`);
    this.primary = await this.boot(this.persistDir);
  }

  private boot(persistDir: string): Promise<Runtime> {
    if (!this.dirs.includes(persistDir)) this.dirs.push(persistDir);
    const database = { DATABASE_URL: this.databaseUrl, NEON_WS_PROXY: this.dbFaults.wsProxy };
    return startRuntime({
      bundles: this.version === 'new' ? this.stack.bundles : this.stack.previous,
      vars: {
        ...SECRETS,
        ...database,
        LARK_API_BASE: this.lark.url,
        AGENT_URL: this.agent.url,
        AGENT_SIGNING_SECRET: AGENT_SECRET,
        LOG_LEVEL: 'warn',
        // Short enough that a schedule's bursts coalesce and turns run within its steps.
        CHANNEL_DEBOUNCE_MS: '300',
        DO_ALARMS: 'auto',
      },
      retentionVars: { ...database, LOG_LEVEL: 'warn' },
      persistDir,
      onLog: (line) => {
        try {
          const entry = JSON.parse(line) as LogLine;
          this.logs.push({ ...entry, replica: persistDir !== this.persistDir });
          if (entry.level === 'error')
            this.trace.add(`log ${entry.event}: ${JSON.stringify(entry.error ?? '').slice(0, 160)}`);
        } catch {
          // By design: workerd's own lines (not JSON) are not the service's log.
        }
      },
    });
  }

  /**
   * Disposes the primary and starts it again: its Durable Objects keep storage, lose memory.
   * With `version`, it starts as that release (a deploy or a rollback mid-schedule: the objects
   * keep their storage and run the other release's code from then on). A second replica keeps
   * the release it started with until it stops.
   */
  async restart(opts: { loseStorage?: boolean; version?: 'new' | 'old' } = {}): Promise<void> {
    while (this.restarting) await this.restarting;
    this.restarting = (async () => {
      this.disruptions++;
      await this.primary.dispose();
      if (opts.version) this.version = opts.version;
      if (opts.loseStorage) {
        await rm(this.persistDir, { recursive: true, force: true });
        await mkdir(this.persistDir, { recursive: true });
      }
      this.primary = await this.boot(this.persistDir);
    })();
    try {
      await this.restarting;
    } finally {
      this.restarting = null;
    }
  }

  async setReplica(on: boolean): Promise<void> {
    if (on && !this.replica)
      this.replica = await this.boot(join(this.stack.tempDir, `${this.name}-replica-${++this.persistGen}`));
    else if (!on && this.replica) {
      const r = this.replica;
      this.replica = null;
      this.disruptions++;
      await r.dispose();
    }
  }

  /** The runtime the next request goes to. */
  private pick(): Runtime {
    this.calls++;
    return this.replica && this.calls % 2 === 0 ? this.replica : this.primary;
  }

  /**
   * One request to the service, recorded. A lost answer (the runtime disposed under it, a
   * timeout) is null, never thrown: it is what a client sees.
   */
  async call(
    what: string,
    path: string,
    init: RequestInit = {},
  ): Promise<{ status: number; body: unknown } | null> {
    while (this.restarting) await this.restarting;
    const before = this.disruptions + this.dbFaults.fired;
    const locks = this.dbFaults.locksHeld;
    let result: { status: number; body: unknown } | null = null;
    try {
      const res = await this.pick().fetch(path, { ...init, signal: AbortSignal.timeout(20_000) });
      const text = await res.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // By design: a non-JSON answer is kept as text.
      }
      result = { status: res.status, body };
    } catch {
      result = null;
    }
    const underFault =
      locks > 0 || this.dbFaults.locksHeld > 0 || this.disruptions + this.dbFaults.fired !== before;
    const code = (result?.body as { error?: { code?: string } } | undefined)?.error?.code;
    this.answers.push({ step: this.trace.step, what, status: result?.status ?? 'lost', code, underFault });
    this.trace.add(
      `${what} → ${result ? `${result.status}${code ? ` ${code}` : ''}` : 'lost'}${underFault ? ' (under fault)' : ''}`,
    );
    return result;
  }

  admin(what: string, method: string, path: string, body?: unknown, token = SECRETS.ADMIN_TOKEN) {
    return this.call(what, path, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  }

  /** Database time now (the test clock), in ms. */
  async dbNow(): Promise<number> {
    const { rows } = await this.db.query<{ ms: string }>(
      'select (extract(epoch from app_now()) * 1000)::bigint as ms',
    );
    return Number(rows[0]!.ms);
  }

  /** Moves the world's clock: the database's test clock and the emulator's, together. */
  async advanceClock(ms: number): Promise<void> {
    await this.db.query('update app_test_clock set offset_ms = offset_ms + $1', [ms]);
    this.lark.state.offsetMs += ms;
  }

  async stop(): Promise<void> {
    await this.replica?.dispose().catch(() => undefined);
    await this.primary?.dispose().catch(() => undefined);
    await this.dbFaults?.close().catch(() => undefined);
    await this.lark?.close().catch(() => undefined);
    await this.agent?.close().catch(() => undefined);
    await this.db?.end().catch(() => undefined);
    await this.stack.dropDatabase(this.name).catch(() => undefined);
    for (const dir of this.dirs) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }

  static id(): string {
    return randomBytes(6).toString('hex');
  }
}
