// npm run migrate: applies migrations/ to DATABASE_URL (a direct postgres:// URL; with Neon
// use the direct, non-pooled connection string).
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { migrate } from './lib/migrator';

const url = process.env.DATABASE_URL;
if (!url) {
  console.error('DATABASE_URL is not set');
  process.exit(1);
}
const dir = fileURLToPath(new URL('../migrations', import.meta.url));
try {
  const applied = await migrate(url, { dir, log: (l) => console.log(l) });
  console.log(applied.length ? `applied ${applied.length} migration(s)` : 'database is up to date');
} catch (err) {
  console.error(`migration failed: ${(err as Error).message}`);
  process.exit(1);
}
