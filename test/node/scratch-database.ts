import pg from 'pg';
import { inject } from 'vitest';
import { migrate } from '../../scripts/lib/migrator';
import { adminQuery, withDatabase } from '../../scripts/lib/postgres';
import { MIGRATIONS_DIR } from '../setup/stack';

/**
 * A migrated database of the test file's own, for tests that need data at scale or a plan of
 * their own (node project: `pg`, no workerd). `open()` creates and migrates it and returns a
 * small pool; `drop()` (in `afterAll`) ends the pool and drops it, whatever state a failed hook
 * left it in.
 */
export function scratchDatabase(prefix: string, max = 2) {
  const adminUrl = inject('adminUrl');
  const name = `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  let pool: pg.Pool | undefined;
  return {
    name,
    async open(): Promise<pg.Pool> {
      await adminQuery(adminUrl, `create database ${name}`);
      const url = withDatabase(adminUrl, name);
      await migrate(url, { dir: MIGRATIONS_DIR });
      pool = new pg.Pool({ connectionString: url, max });
      // A client the final `drop database … with (force)` terminates (a hook that timed out left
      // it busy) must not crash the run with an unhandled 'error': the timed-out hook already fails.
      pool.on('error', (err) => console.error(`${name}: pool client error after the test: ${err.message}`));
      return pool;
    },
    async drop(): Promise<void> {
      await pool?.end();
      // Handled by design: a database left behind is the test machine's, never a result.
      await adminQuery(adminUrl, `drop database if exists ${name} with (force)`).catch(() => undefined);
    },
  };
}

/**
 * Every plan node (EXPLAIN format json) reading `relation`, the write itself left out: its node
 * type, and its index and condition (a bitmap heap scan's come from the bitmap index scan
 * under it), with the node's own fields for anything else.
 */
export function planReads(
  node: unknown,
  relation: string,
  out: { type: string; index?: string; cond?: string; node: Record<string, unknown> }[] = [],
) {
  if (Array.isArray(node)) for (const n of node) planReads(n, relation, out);
  else if (node !== null && typeof node === 'object') {
    const n = node as Record<string, unknown>;
    if (n['Relation Name'] === relation && n['Node Type'] !== 'ModifyTable') {
      const bitmap = (n.Plans as Record<string, unknown>[] | undefined)?.find(
        (c) => c['Node Type'] === 'Bitmap Index Scan',
      );
      out.push({
        type: String(n['Node Type']),
        index: (n['Index Name'] ?? bitmap?.['Index Name']) as string | undefined,
        cond: (n['Index Cond'] ?? bitmap?.['Index Cond']) as string | undefined,
        node: n,
      });
    }
    for (const v of Object.values(n)) planReads(v, relation, out);
  }
  return out;
}
