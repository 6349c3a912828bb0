import type { Pool, PoolClient } from '@neondatabase/serverless';
import { preludeTexts } from '../../workers/db/driver-internals';

/**
 * Counts the round trips made through `pool` from now on: every `query` of a client the pool
 * hands out (checked out by the caller or by the pool's own one-shot `pool.query`) is one
 * exchange ending in one ReadyForQuery, what bench/suites/50-channel.ts counts on the wire.
 * `texts` holds each one's SQL, abbreviated, in order (`begin; ...` for the one that opens a
 * transaction: withTx sends its begin with the first statement). Only the public API is wrapped
 * (`pool.connect`, `client.query`).
 */
export function countRoundTrips(pool: Pool): { texts: string[]; stop(): void } {
  const texts: string[] = [];
  let on = true;
  const wrapped = new WeakSet<PoolClient>();
  const connect = pool.connect.bind(pool) as () => Promise<PoolClient>;
  pool.connect = (async () => {
    const client = await connect();
    if (!wrapped.has(client)) {
      wrapped.add(client);
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      client.query = ((...args: unknown[]) => {
        if (on) texts.push(textOf(args[0]));
        return query(...args);
      }) as typeof client.query;
    }
    return client;
  }) as typeof pool.connect;
  return {
    texts,
    stop: () => {
      on = false;
    },
  };
}

/** The statement's SQL; a transaction's first statement, which carries its `begin`, as `begin; <sql>`. */
function textOf(q: unknown): string {
  const text = typeof q === 'string' ? q : ((q as { text?: string }).text ?? '?');
  const opensTx = preludeTexts(q).some((p) => p.startsWith('begin'));
  return `${opensTx ? 'begin; ' : ''}${text.replace(/\s+/g, ' ').trim().slice(0, 60)}`;
}
