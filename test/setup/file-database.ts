import { abortAllDurableObjects, listDurableObjectIds, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, beforeAll, inject } from 'vitest';
import { openPool } from '../../workers/db/pool';
import { forgetDbClockOffset } from '../helpers/db';

/**
 * Every workerd test file runs on a database and a Lark emulator of its own, even though the
 * files a vitest worker runs share one runtime (`isolate: false`, vitest.config.ts): the
 * runtime's bindings (DATABASE_URL, LARK_API_BASE, the retention Worker's own DATABASE_URL)
 * keep their values from file to file, so what a file leaves behind is replaced under the same
 * names when it ends: every Durable Object of the runtime is aborted (what a file's objects
 * still run stops there, instead of writing into the next file's database) and their storage
 * deleted, the database is dropped (`force` ends the connections a pool of the file still
 * holds) and created again from the migrated template, and the emulator is reset to a new one
 * on the same port. The next file starts as the first did.
 */
/**
 * A file starts on nothing another file left: no Durable Object with storage, no emulator
 * call. A reset that missed something fails the next file here, not somewhere in its tests.
 */
beforeAll(async () => {
  for (const value of Object.values(env)) {
    if (!isNamespace(value)) continue;
    // Listed ids outlive deleteAll (the object's file stays); what counts is its contents.
    for (const id of await listDurableObjectIds(value)) {
      const left = await runInDurableObject(value.get(id), async (_, state) => ({
        keys: (await state.storage.list({ limit: 1 })).size,
        alarm: await state.storage.getAlarm(),
      }));
      if (left.keys > 0 || left.alarm !== null)
        throw new Error('test harness: a Durable Object with storage or an alarm left by an earlier file');
    }
  }
  // The objects the check woke start from their constructor again, as in a runtime of their own.
  await abortAllDurableObjects();
  if (env.LARK_API_BASE) {
    const { calls } = (await (await fetch(`${env.LARK_API_BASE}/__emulator/calls`)).json()) as {
      calls: unknown[];
    };
    if (calls.length > 0)
      throw new Error(`test harness: ${calls.length} emulator call(s) left by an earlier file`);
  }
});

afterAll(async () => {
  await abortAllDurableObjects();
  await clearDurableObjectStorage();
  const database = new URL(directUrl()).pathname.slice(1);
  const admin = openPool(
    { DATABASE_URL: inject('adminUrl'), NEON_WS_PROXY: env.NEON_WS_PROXY, DB_STATEMENT_TIMEOUT_MS: 30_000 },
    1,
  );
  try {
    // Bare client statements: pool.query runs each statement with its budget in one
    // implicit transaction (workers/db/one-shot.ts), where DROP/CREATE DATABASE are refused.
    const client = await admin.connect();
    try {
      // Work of the file that is not a Durable Object's (a request's waitUntil) finishes its
      // statement on this database first, up to 5 s, rather than being cut and retrying
      // into the next file's.
      for (let waited = 0; waited < 5000; waited += 25) {
        const { rows } = await client.query(
          `select count(*)::int as busy from pg_stat_activity
            where datname = $1 and pid <> pg_backend_pid() and state <> 'idle'`,
          [database],
        );
        if (rows[0].busy === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      await client.query(`drop database if exists ${database} with (force)`);
      // FILE_COPY: the template's files copied as they are, not written block by block into
      // the WAL (the default since PG 15): a third less time per file on the embedded server
      // (fsync off), measured three files at once.
      await client.query(
        `create database ${database} template ${inject('templateDatabase')} strategy file_copy`,
      );
    } finally {
      client.release();
    }
  } finally {
    await admin.end();
  }
  forgetDbClockOffset();
  // The retention project has no emulator.
  if (env.LARK_API_BASE) {
    const reset = await fetch(`${env.LARK_API_BASE}/__emulator/reset`, { method: 'POST' });
    if (!reset.ok) throw new Error(`emulator reset answered ${reset.status}`);
  }
});

/**
 * Storage and alarm of every object of the main Worker's namespaces (cloudflare:test's
 * `reset()` leaves Durable Object storage as it is). Aborted first, so nothing of the file
 * writes after this.
 */
async function clearDurableObjectStorage(): Promise<void> {
  for (const value of Object.values(env)) {
    if (!isNamespace(value)) continue;
    for (const id of await listDurableObjectIds(value)) {
      await runInDurableObject(value.get(id), async (_, state) => {
        await state.storage.deleteAlarm();
        await state.storage.deleteAll();
      });
    }
  }
  // The objects just used (to clear them) start again from nothing at their next request.
  await abortAllDurableObjects();
}

function isNamespace(value: unknown): value is DurableObjectNamespace {
  // By class: a service binding's RPC stub answers any property, idFromName included.
  return (value as object | null)?.constructor?.name === 'DurableObjectNamespace';
}

/** The file database itself (on a PGBOUNCER=1 run DATABASE_URL names PgBouncer's port). */
function directUrl(): string {
  return (env as { TEST_DIRECT_DATABASE_URL?: string }).TEST_DIRECT_DATABASE_URL ?? env.DATABASE_URL!;
}
