import { dirname } from 'node:path';
import type { Readable } from 'node:stream';
import { convertV4MiniflareOptions, Miniflare } from 'miniflare';
import { type Bundles, workerOptions } from '../../../chaos/runtime';

/**
 * Two releases of the service in one Miniflare, on one database, the way a gradual deployment
 * runs them: each release's main Worker and retention Worker, each main Worker bound to its own
 * release's retention Worker, and the ActorHost binding of each main Worker pointing at the
 * OTHER release's class (a Worker on new code calling an object still on old code, and the
 * other way round, docs/operations.md "Two versions at once"). Typing maintenance and the
 * workspace quota stay each release's own.
 */
export const NAMES = {
  new: { main: 'reaction-ledger', retention: 'reaction-ledger-retention' },
  old: { main: 'reaction-ledger-old', retention: 'reaction-ledger-retention-old' },
} as const;

export type Release = keyof typeof NAMES;

export interface MixedRuntime {
  /** A request to one release's main Worker. */
  fetch(release: Release, path: string, init?: RequestInit): Promise<Response>;
  /** One release's minute cron, to its end: its outcome. */
  minuteCron(release: Release): Promise<string>;
  /** One release's retention Worker's hourly cron, to its end: its outcome. */
  hourlyCron(release: Release): Promise<string>;
  dispose(): Promise<void>;
}

export async function startMixedRuntime(opts: {
  bundles: Record<Release, Bundles>;
  vars: Record<string, string>;
  /** Per release, on top of `vars` (each release's own agent, say). */
  releaseVars?: Partial<Record<Release, Record<string, string>>>;
  retentionVars: Record<string, string>;
  persistDir: string;
  onLog: (line: string) => void;
}): Promise<MixedRuntime> {
  const workers: unknown[] = [];
  for (const release of ['new', 'old'] as const) {
    const b = opts.bundles[release];
    const other = release === 'new' ? 'old' : 'new';
    const main = await workerOptions(b.mainConfig);
    const retention = await workerOptions(b.retentionConfig);
    const objects = main.durableObjects as Record<string, Record<string, unknown>>;
    workers.push(
      {
        ...main,
        name: NAMES[release].main,
        modules: true,
        modulesRoot: dirname(b.main),
        scriptPath: b.main,
        bindings: { ...(main.bindings as object), ...opts.vars, ...opts.releaseVars?.[release] },
        durableObjects: {
          ...objects,
          // Unused by the code: workerd defines a Worker's namespace only for a class one of its
          // own bindings names, and the other release's ACTOR_HOST binding needs it defined.
          ACTOR_HOST_DEFINED_HERE: { ...objects.ACTOR_HOST, className: 'ActorHost' },
          ACTOR_HOST: { ...objects.ACTOR_HOST, className: 'ActorHost', scriptName: NAMES[other].main },
        },
        serviceBindings: { RETENTION: { name: NAMES[release].retention } },
      },
      {
        ...retention,
        name: NAMES[release].retention,
        modules: true,
        modulesRoot: dirname(b.retention),
        scriptPath: b.retention,
        bindings: { ...(retention.bindings as object), ...opts.retentionVars },
      },
    );
  }
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      host: '127.0.0.1',
      port: 0,
      durableObjectsPersist: opts.persistDir,
      unsafeTriggerHandlers: true,
      workers,
      handleRuntimeStdio: (stdout: Readable, stderr: Readable) => {
        for (const stream of [stdout, stderr]) {
          let rest = '';
          stream.on('data', (chunk: Buffer) => {
            const lines = (rest + chunk.toString('utf8')).split('\n');
            rest = lines.pop() ?? '';
            for (const line of lines) if (line.trim()) opts.onLog(line);
          });
        }
      },
    } as never),
  );
  await mf.ready;
  const worker = (name: string) => mf.getWorker(name);
  return {
    fetch: async (release, path, init) =>
      (await worker(NAMES[release].main)).fetch(
        `http://service${path}`,
        init as never,
      ) as unknown as Response,
    minuteCron: async (release) =>
      (await (await worker(NAMES[release].main)).scheduled({ cron: '* * * * *', scheduledTime: new Date() }))
        .outcome,
    hourlyCron: async (release) =>
      (
        await (
          await worker(NAMES[release].retention)
        ).scheduled({ cron: '0 * * * *', scheduledTime: new Date() })
      ).outcome,
    dispose: () => mf.dispose(),
  };
}
