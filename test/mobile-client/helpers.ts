import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { ManualScheduler, MemoryStore, ReactionClient } from '../../clients/mobile/src';
import type { FetchLike } from '../../clients/mobile/src/transport';
import worker from '../../workers/index';
import { advanceDbClock, dbClockOffsetMs } from '../helpers/db';

/**
 * A device's network in front of the real Worker (exports.default.fetch): online, offline
 * (the request never leaves), or one-shot faults on the next matching request: a lost
 * response (the server handled it, the app never hears back), a 502 from an intermediary,
 * or a hang (the app is killed while waiting).
 */
export type Fault =
  | 'lose-response'
  | 'drop-request'
  | 'bad-gateway'
  | 'hang-after-server'
  | 'hang-before-server';

export class Network {
  offline = false;
  readonly log: string[] = [];
  /** Requests that reached the Worker (`log` also has those that met a fault first). */
  readonly served: string[] = [];
  private faults: { method: string; path: RegExp; fault: Fault; reached: () => void }[] = [];
  private holds: { method: string; path: RegExp; at: 'before-server' | 'after-server'; hold: Hold }[] = [];

  /**
   * `bindings` override the Worker's env (e.g. tighter quotas), as production would run it. A
   * test may swap them between requests (e.g. a tight request limiter, then the usual one).
   */
  constructor(public bindings?: Record<string, unknown>) {}

  /**
   * Arms a one-shot fault. The promise resolves when a request has met it: for the faults
   * after the server, once the server has answered (so its work is committed); for a hang,
   * once the request is parked. A test awaits it instead of polling for the request.
   */
  fault(method: string, path: RegExp, fault: Fault): Promise<void> {
    return new Promise((reached) => this.faults.push({ method, path, fault, reached }));
  }

  /**
   * Parks the next matching request until the test calls `release()`: before the server
   * (nothing reached it yet) or after it (the server answered; the answer is held). Like a
   * real fetch, a request whose signal was aborted while parked rejects with AbortError on
   * release instead of going on, so an abort the client sends is what decides.
   */
  hold(method: string, path: RegExp, at: 'before-server' | 'after-server' = 'before-server'): Hold {
    const hold = newHold();
    this.holds.push({ method, path, at, hold });
    return hold;
  }

  clearFaults(): void {
    this.faults = [];
  }

  count(method: string, path: RegExp): number {
    return this.log.filter((l) => l.startsWith(`${method} `) && path.test(l.slice(method.length + 1))).length;
  }

  readonly fetch: FetchLike = async (input, init) => {
    const method = init.method ?? 'GET';
    const path = new URL(input).pathname;
    if (this.offline) throw new TypeError('Network request failed (offline)');
    this.log.push(`${method} ${path}`);
    const h = this.holds.findIndex((x) => x.method === method && x.path.test(path));
    const held = h >= 0 ? this.holds.splice(h, 1)[0]! : null;
    if (held) return this.parked(held.hold, held.at, input, init);
    const i = this.faults.findIndex((f) => f.method === method && f.path.test(path));
    const armed = i >= 0 ? this.faults.splice(i, 1)[0]! : null;
    switch (armed?.fault) {
      case 'drop-request':
        armed.reached();
        throw new TypeError('Network request failed');
      case 'bad-gateway':
        armed.reached();
        return new Response('<html>502</html>', { status: 502 });
      case 'hang-before-server':
        armed.reached();
        return new Promise<Response>(() => undefined);
    }
    const { signal: _signal, ...rest } = init;
    const res = await this.server(input, rest);
    if (!armed) return res;
    await res.text(); // the server finished the request
    armed.reached();
    if (armed.fault === 'lose-response') throw new TypeError('Network connection was lost');
    return new Promise<Response>(() => undefined); // hang-after-server
  };

  private async parked(
    hold: Hold,
    at: 'before-server' | 'after-server',
    input: string,
    init: RequestInit,
  ): Promise<Response> {
    const { signal, ...rest } = init;
    const abortedError = () => new DOMException('The operation was aborted', 'AbortError');
    let res: Response | null = null;
    if (at === 'after-server') {
      res = await this.server(input, rest);
      await res.clone().text(); // the server finished the request
    }
    hold.markReached();
    await hold.released;
    if (signal?.aborted) throw abortedError();
    return res ?? this.server(input, rest);
  }

  private async server(input: string, init: RequestInit): Promise<Response> {
    this.served.push(`${init.method ?? 'GET'} ${new URL(input).pathname}`);
    if (!this.bindings) return exports.default.fetch(input, init);
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request(input, init), { ...env, ...this.bindings }, ctx);
    const body = await res.arrayBuffer();
    await waitOnExecutionContext(ctx);
    return new Response(body, { status: res.status, headers: res.headers });
  }
}

/** A parked request or write: `reached` once it is parked, `release()` lets it go on. */
export interface Hold {
  reached: Promise<void>;
  release(): void;
  released: Promise<void>;
  markReached(): void;
}

function newHold(): Hold {
  let reached!: () => void;
  let release!: () => void;
  return {
    reached: new Promise<void>((r) => {
      reached = r;
    }),
    release: () => release(),
    released: new Promise<void>((r) => {
      release = r;
    }),
    markReached: () => reached(),
  };
}

export const WRITE = /^\/v1\/reaction-operations\/[^/]+$/;
export const RETIRE = /^\/v1\/reaction-operations\/[^/]+\/retire$/;
export const ISSUE = /^\/v1\/reaction-tickets$/;

export interface Device {
  client: ReactionClient;
  network: Network;
  storage: MemoryStore;
  clock: ManualScheduler;
}

/** A device; pass `storage` (and `network`) of an earlier one to simulate an app restart. */
export function device(
  opts: { storage?: MemoryStore; network?: Network; clock?: ManualScheduler } = {},
): Device {
  const storage = opts.storage ?? new MemoryStore();
  const network = opts.network ?? new Network();
  // The device's clock starts at the server's (test database) time; tests move both with elapse().
  const clock = opts.clock ?? new ManualScheduler(Date.now() + dbClockOffsetMs());
  const client = new ReactionClient({
    baseUrl: 'http://device',
    storage,
    fetch: network.fetch,
    scheduler: clock,
    autoSync: false,
    requestTimeoutMs: 10_000,
    backoff: { baseMs: 1000, maxMs: 60_000, random: () => 1 },
  });
  return { client, network, storage, clock };
}

/** Server-side rows of one actor: proves "applied once" and "no new operation minted". */
export async function serverRows(pool: Pool, actorId: string) {
  const { rows } = await pool.query(
    `select (select count(*)::int from private.reaction_tickets where actor_id = $1) as tickets,
            (select count(*)::int from private.chat_reaction_operations where actor_id = $1) as receipts,
            (select count(*)::int from private.chat_retired_reaction_operations where actor_id = $1) as fences`,
    [actorId],
  );
  return rows[0] as { tickets: number; receipts: number; fences: number };
}

/**
 * A device disk whose next matching write (or read) can be held: the value is stored at once (writes
 * land in the order they were made, as AsyncStorage and SQLite do) but the promise resolves
 * only on `release()`. Lets a test choose which journaling step finishes first.
 */
export class HeldStore extends MemoryStore {
  private holds: { match: (key: string, value: string) => boolean; hold: Hold }[] = [];

  holdWrite(match: (key: string, value: string) => boolean): Hold {
    const hold = newHold();
    this.holds.push({ match, hold });
    return hold;
  }

  private readHolds: { match: (key: string) => boolean; hold: Hold }[] = [];

  /** Holds the next read of a matching key: it resolves (with the value at release) on `release()`. */
  holdRead(match: (key: string) => boolean): Hold {
    const hold = newHold();
    this.readHolds.push({ match, hold });
    return hold;
  }

  override async getItem(key: string): Promise<string | null> {
    const i = this.readHolds.findIndex((h) => h.match(key));
    if (i >= 0) {
      const { hold } = this.readHolds.splice(i, 1)[0]!;
      hold.markReached();
      await hold.released;
    }
    return super.getItem(key);
  }

  override async setItem(key: string, value: string): Promise<void> {
    await super.setItem(key, value);
    const i = this.holds.findIndex((h) => h.match(key, value));
    if (i < 0) return;
    const { hold } = this.holds.splice(i, 1)[0]!;
    hold.markReached();
    await hold.released;
  }
}

/** Time passes for the server (test database clock) and for every given device clock alike. */
export async function elapse(pool: Pool, ms: number, ...clocks: ManualScheduler[]): Promise<void> {
  await advanceDbClock(pool, ms);
  for (const clock of clocks) clock.advance(ms);
}
