import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import {
  deployProblems,
  readWorkerConfig,
  WORKER_CONFIGS,
  withTelemetryDestinations,
} from '../../../scripts/lib/deploy-checks';

type RateLimit = { name: string; namespace_id: string };

const root = fileURLToPath(new URL('../../..', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'reaction-ledger-config-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The config's text with `edit` applied, written next to nothing (main need not resolve). */
function edited(file: string, edit: (text: string) => string): string {
  const path = join(scratch, file.replace('/', '_'));
  writeFileSync(path, edit(readFileSync(join(root, file), 'utf8')));
  return path;
}

describe('every deployable Worker declares observability, source maps and no public workers.dev', () => {
  for (const file of WORKER_CONFIGS)
    for (const env of [undefined, 'staging'])
      it(`${file}${env ? ` [env.${env}]` : ''}`, () => {
        expect(deployProblems(readWorkerConfig(join(root, file), env))).toEqual([]);
      });

  it('a config that loses its [observability] block is refused', () => {
    // The block and its sub-tables sit right before [triggers].
    const path = edited('wrangler.toml', (t) => t.replace(/\[observability\][\s\S]*?(?=\[triggers\])/, ''));
    expect(readFileSync(path, 'utf8')).not.toContain('[observability');
    const problems = deployProblems(readWorkerConfig(path));
    expect(problems).toContain('observability.enabled must be true');
    expect(problems).toContain('observability.logs.enabled must be true');
    expect(problems).toContain('observability.traces.enabled must be true');
  });

  it('a workers.dev hostname or missing source maps is refused', () => {
    const path = edited('retention.wrangler.toml', (t) =>
      t.replace('workers_dev = false', 'workers_dev = true').replace('upload_source_maps = true\n', ''),
    );
    const problems = deployProblems(readWorkerConfig(path));
    expect(problems).toEqual(['upload_source_maps must be true', 'workers_dev must be false']);
  });

  it('the dev-only failing echo agent (ECHO_AGENT_FAIL_MARKER) is refused', () => {
    const path = edited('wrangler.toml', (t) =>
      t.replace(/^\[vars\]\n/m, '[vars]\nECHO_AGENT_FAIL_MARKER = "/fail"\n'),
    );
    expect(readFileSync(path, 'utf8')).toContain('ECHO_AGENT_FAIL_MARKER');
    expect(deployProblems(readWorkerConfig(path))).toEqual([
      'ECHO_AGENT_FAIL_MARKER is npm run dev only (the echo agent fails turns on demand)',
    ]);
  });
});

describe('[env.staging] is production with its own resources', () => {
  for (const file of WORKER_CONFIGS)
    it(`${file}: the same vars and bindings under another Worker name`, () => {
      const top = readWorkerConfig(join(root, file));
      const staging = readWorkerConfig(join(root, file), 'staging');
      expect(staging.name).toBe(`${top.name}-staging`);
      expect(staging.vars).toEqual(top.vars);
      expect(staging.durable_objects.bindings).toEqual(top.durable_objects.bindings);
      expect(staging.triggers).toEqual(top.triggers);
      expect(staging.compatibility_date).toBe(top.compatibility_date);
      expect(staging.placement).toEqual(top.placement);
      // The version id /healthz answers with, which `npm run deploy`'s smoke test reads.
      expect(staging.version_metadata).toEqual(top.version_metadata);
      expect(staging.ratelimits.map((r: RateLimit) => ({ ...r, namespace_id: undefined }))).toEqual(
        top.ratelimits.map((r: RateLimit) => ({ ...r, namespace_id: undefined })),
      );
      // Rate-limit counters are per namespace: staging traffic never spends production's.
      for (const r of staging.ratelimits)
        expect(top.ratelimits.map((t: RateLimit) => t.namespace_id)).not.toContain(r.namespace_id);
      // Tail consumers and service bindings point at the staging Worker of the same name.
      expect(staging.tail_consumers ?? []).toEqual(
        (top.tail_consumers ?? []).map((t: { service: string }) => ({
          ...t,
          service: `${t.service}-staging`,
        })),
      );
      expect(staging.services).toEqual(
        (top.services ?? []).map((s: { binding: string; service: string }) => ({
          ...s,
          service: `${s.service}-staging`,
        })),
      );
    });
});

describe('OpenTelemetry export destinations are set per deploy, from the environment', () => {
  const text = readFileSync(join(root, 'wrangler.toml'), 'utf8');

  it('none set: the committed config, unchanged', () => {
    expect(withTelemetryDestinations(text, {})).toBe(text);
  });

  it('logs and traces get their own lists; the rest of the config is untouched', () => {
    const out = withTelemetryDestinations(text, {
      OTEL_LOGS_DESTINATIONS: 'grafana-logs, honeycomb',
      OTEL_TRACES_DESTINATIONS: 'honeycomb',
    });
    const path = join(scratch, 'otel.toml');
    writeFileSync(path, out);
    const config = readWorkerConfig(path);
    expect(config.observability?.logs?.destinations).toEqual(['grafana-logs', 'honeycomb']);
    expect(config.observability?.traces?.destinations).toEqual(['honeycomb']);
    expect(deployProblems(config)).toEqual([]);
    expect(out.replace(/destinations = \[[^\]]*\]/g, 'destinations = []')).toBe(text);
  });

  it('a value that is not a destination name is refused, never written into the config', () => {
    expect(() =>
      withTelemetryDestinations(text, { OTEL_LOGS_DESTINATIONS: 'a"]\nworkers_dev = true' }),
    ).toThrow(/not a destination name/);
  });
});
