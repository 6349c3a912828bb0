/**
 * `npx tsx scripts/deploy-config.ts <config>`: writes the config to deploy with, the committed one
 * plus the OpenTelemetry destinations named by OTEL_LOGS_DESTINATIONS / OTEL_TRACES_DESTINATIONS
 * (docs/operations.md "Observability in production"), into .local/deploy/, and prints its path:
 * `npx wrangler deploy -c "$(npx tsx scripts/deploy-config.ts wrangler.toml)"`. With neither
 * variable set it prints the committed config's own path.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { withTelemetryDestinations } from './lib/deploy-checks';

const root = fileURLToPath(new URL('..', import.meta.url));
const config = process.argv[2];
if (!config) {
  console.error('usage: tsx scripts/deploy-config.ts <wrangler config>');
  process.exit(2);
}
const text = readFileSync(join(root, config), 'utf8');
const out = withTelemetryDestinations(text, process.env);
if (out === text) {
  console.log(join(root, config));
} else {
  const dir = join(root, '.local/deploy');
  mkdirSync(dir, { recursive: true });
  const path = join(dir, basename(config));
  // Paths in a wrangler config are relative to the file: main moves with it.
  const main = /^main = "([^"]+)"$/m.exec(out)?.[1];
  const moved = main ? out.replace(`main = "${main}"`, `main = "${relative(dir, join(root, main))}"`) : out;
  writeFileSync(path, moved);
  console.log(path);
}
