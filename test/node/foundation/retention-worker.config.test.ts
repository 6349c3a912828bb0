// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { unstable_readConfig } from 'wrangler';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const read = (file: string) => unstable_readConfig({ config: `${root}${file}` });

describe('the retention cleanup is its own Worker', () => {
  const main = read('wrangler.toml');
  const retention = read('retention.wrangler.toml');

  it('has its own hourly cron and Durable Object; the main Worker has neither', () => {
    expect(retention.name).not.toBe(main.name);
    expect(retention.triggers.crons).toEqual(['0 * * * *']);
    expect(retention.durable_objects.bindings).toEqual([
      { name: 'RETENTION_CLEANUP', class_name: 'RetentionCleanup' },
    ]);
    expect(main.triggers.crons).not.toContain('0 * * * *');
    expect(main.durable_objects.bindings.map((b: { class_name: string }) => b.class_name)).not.toContain(
      'RetentionCleanup',
    );
  });

  it('has no public surface: the main Worker reaches it through the RETENTION service binding', () => {
    expect(retention.workers_dev).toBe(false);
    expect(retention.routes ?? []).toEqual([]);
    expect(retention.route).toBeUndefined();
    expect(main.services).toContainEqual({ binding: 'RETENTION', service: retention.name });
  });

  it('shares the runtime and the settings that must agree with the main Worker', () => {
    expect(retention.compatibility_date).toBe(main.compatibility_date);
    // DB_STATEMENT_TIMEOUT_MS: the same Neon driver settings; REACTION_TX_BUDGET_MS: the
    // prerequisites gate derives the longest reaction transaction from it.
    for (const name of ['DB_STATEMENT_TIMEOUT_MS', 'REACTION_TX_BUDGET_MS', 'LOG_LEVEL'])
      expect(retention.vars[name], name).toBe(main.vars[name]);
    // Its own budgets live in its own config, not the main Worker's.
    for (const name of Object.keys(retention.vars).filter((n) => n.startsWith('RETENTION_')))
      expect(main.vars[name], name).toBeUndefined();
  });
});
