/**
 * `npx tsx scripts/deploy-config.ts <config>`: writes the config to deploy with, the committed one
 * plus the OpenTelemetry destinations named by OTEL_LOGS_DESTINATIONS / OTEL_TRACES_DESTINATIONS
 * (docs/operations.md "Observability in production"), into .local/deploy/, and prints its path:
 * `npx wrangler deploy -c "$(npx tsx scripts/deploy-config.ts wrangler.toml)"`. With neither
 * variable set it prints the committed config's own path. `npm run deploy` does the same itself.
 */
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { deployConfigPath } from './lib/deploy-checks';

const root = fileURLToPath(new URL('..', import.meta.url));
const config = process.argv[2];
if (!config) {
  console.error('usage: tsx scripts/deploy-config.ts <wrangler config>');
  process.exit(2);
}
console.log(deployConfigPath(root, config, process.env));
