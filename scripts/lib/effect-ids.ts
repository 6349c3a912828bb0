/**
 * For seeds (tests, benches): SQL for effect ids shaped like production's
 * (workers/effects/ids.ts): UUIDv7, 48 bits of milliseconds then random bits, so ids sort by
 * staging time and the primary key and the heap fill in the same order, and `effects_id_v7`
 * (migrations/0260) accepts them; it refuses `gen_random_uuid()`'s v4 ids. `msExpr` is the
 * row's staging time in epoch ms (e.g. `app_now_ms() + g` over a generate_series). Works on
 * PostgreSQL 15, which has no `uuidv7()`.
 */
export function uuidv7Sql(msExpr: string): string {
  return `encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
            placing substring(int8send((${msExpr})::bigint) from 3) from 1 for 6), 52, 1), 53, 1), 'hex')::uuid`;
}
