// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { unstable_readConfig } from 'wrangler';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const read = (file: string) => unstable_readConfig({ config: `${root}${file}` });

describe('the alerts Tail Worker is bound by both Workers', () => {
  const alerts = read('alerts.wrangler.toml');

  it('both configs name it in tail_consumers', () => {
    for (const config of ['wrangler.toml', 'retention.wrangler.toml'])
      expect(read(config).tail_consumers, config).toEqual([{ service: alerts.name }]);
  });

  it('has no public surface, its own AlertGate object, and the main runtime', () => {
    expect(alerts.workers_dev).toBe(false);
    expect(alerts.routes ?? []).toEqual([]);
    expect(alerts.durable_objects.bindings).toEqual([{ name: 'ALERT_GATE', class_name: 'AlertGate' }]);
    expect(alerts.compatibility_date).toBe(read('wrangler.toml').compatibility_date);
    // The webhook URL is a secret (wrangler secret put), never a var in the file.
    expect(alerts.vars.ALERT_WEBHOOK_URL).toBeUndefined();
  });
});
