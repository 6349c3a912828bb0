import { writeFileSync } from 'node:fs';
import WebSocket from 'ws';

/**
 * A CPU profile of the Worker's isolate in `wrangler dev`, through wrangler's inspector
 * (Chrome DevTools protocol over a WebSocket; `--inspector-port`). The Worker and its
 * Durable Objects share the isolate locally, so the profile covers the answer path, the
 * post-answer work and the actor hosts together. Written as a `.cpuprofile` (DevTools opens
 * it) and summarised as self time per function, per source file and per bundled module.
 */
interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; scriptId?: string };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples?: number[];
  timeDeltas?: number[];
  startTime: number;
  endTime: number;
}

export interface CpuProfiler {
  stop(file: string): Promise<ProfileSummary>;
}

export interface ProfileSummary {
  /** Wall time covered, ms. */
  wallMs: number;
  /** Sampled time not idle, ms. */
  busyMs: number;
  topFunctions: { name: string; selfMs: number }[];
  topFiles: { file: string; selfMs: number }[];
  /**
   * Self time per source module of the bundle (esbuild's `// path` markers in wrangler's
   * bundle), the runtime's native calls (a WebSocket send, a timer, SQLite) counted to the
   * module that made them: where an event's CPU goes, by library and by our own module.
   */
  topModules: { module: string; selfMs: number }[];
}

async function target(inspectorPort: number): Promise<string> {
  for (let i = 0; i < 40; i++) {
    const list = await fetch(`http://127.0.0.1:${inspectorPort}/json`)
      .then((r) => r.json() as Promise<{ webSocketDebuggerUrl: string; title?: string }[]>)
      .catch(() => []);
    // wrangler lists the user Worker's isolate (and, with several Workers, one per Worker).
    const first = list.find((t) => t.webSocketDebuggerUrl);
    if (first) return first.webSocketDebuggerUrl;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`no inspector target on port ${inspectorPort}`);
}

export async function startCpuProfile(inspectorPort: number, samplingIntervalUs = 200): Promise<CpuProfiler> {
  const socket = new WebSocket(await target(inspectorPort));
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('error', reject);
  });
  let seq = 0;
  const waiting = new Map<number, (result: unknown) => void>();
  socket.on('message', (data: Buffer) => {
    const msg = JSON.parse(data.toString()) as { id?: number; result?: unknown };
    if (msg.id !== undefined) waiting.get(msg.id)?.(msg.result);
  });
  const send = (method: string, params: object = {}) =>
    new Promise<unknown>((resolve) => {
      const id = ++seq;
      waiting.set(id, resolve);
      socket.send(JSON.stringify({ id, method, params }));
    });
  /** The bundle's module markers, `[first line, module path]` in line order (empty if unreadable). */
  const bundleModules = async (scriptId: string | undefined): Promise<[number, string][]> => {
    if (!scriptId) return [];
    // Enabling the debugger only now keeps it off during the measurement.
    await send('Debugger.enable');
    const { scriptSource = '' } = (await send('Debugger.getScriptSource', { scriptId })) as {
      scriptSource?: string;
    };
    await send('Debugger.disable');
    const out: [number, string][] = [];
    scriptSource.split('\n').forEach((line, i) => {
      // esbuild's marker before each module, relative to the config's folder (`../workers/...`).
      const m = /^\/\/ (?:\.\.\/)*((?:node_modules|workers|durable-objects|emulator|scripts)\/\S+)$/.exec(
        line,
      );
      if (m) out.push([i, m[1]!.replace(/^node_modules\//, '')]);
    });
    return out;
  };
  await send('Profiler.enable');
  await send('Profiler.setSamplingInterval', { interval: samplingIntervalUs });
  await send('Profiler.start');
  return {
    async stop(file) {
      const { profile } = (await send('Profiler.stop')) as { profile: Profile };
      const bundle = profile.nodes.find((n) => n.callFrame.url.endsWith('/bundle/index.js'));
      // A summary without modules when the source cannot be read (the functions still say much).
      const modules = await bundleModules(bundle?.callFrame.scriptId).catch(() => []);
      socket.close();
      writeFileSync(file, JSON.stringify(profile));
      return summarise(profile, modules);
    },
  };
}

/** The module of a bundle line: the last marker at or before it. */
function moduleAt(modules: [number, string][], line: number): string | undefined {
  let lo = 0;
  let hi = modules.length - 1;
  let found: string | undefined;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (modules[mid]![0] <= line) {
      found = modules[mid]![1];
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return found;
}

function summarise(profile: Profile, modules: [number, string][] = []): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfUs = new Map<number, number>();
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  for (let i = 0; i < samples.length; i++) {
    // Each delta is the time before sample i; attribute the next delta to sample i.
    const us = deltas[i + 1] ?? 0;
    selfUs.set(samples[i]!, (selfUs.get(samples[i]!) ?? 0) + us);
  }
  /** The bundle module of a node, or of its nearest ancestor in the bundle (a native call's caller). */
  const moduleOf = (n: ProfileNode): string => {
    for (let at: ProfileNode | undefined = n; at; at = byId.get(parent.get(at.id) ?? -1)) {
      if (at.callFrame.url.endsWith('/bundle/index.js'))
        return moduleAt(modules, at.callFrame.lineNumber) ?? 'index.js (before any module marker)';
    }
    return n.callFrame.functionName || n.callFrame.url || '(runtime)';
  };
  const fns = new Map<string, number>();
  const files = new Map<string, number>();
  const mods = new Map<string, number>();
  let busy = 0;
  for (const [id, us] of selfUs) {
    const n = byId.get(id)!;
    const name = n.callFrame.functionName || '(anonymous)';
    if (name === '(idle)' || name === '(program)') continue;
    busy += us;
    const file = n.callFrame.url.replace(/^.*\/(node_modules\/)?/, '') || name;
    const key = `${name} ${file}:${n.callFrame.lineNumber + 1}`;
    fns.set(key, (fns.get(key) ?? 0) + us);
    files.set(file, (files.get(file) ?? 0) + us);
    if (modules.length > 0) {
      const m = moduleOf(n);
      mods.set(m, (mods.get(m) ?? 0) + us);
    }
  }
  const top = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).slice(0, 25);
  const ms = (us: number) => Math.round(us / 100) / 10;
  return {
    wallMs: (profile.endTime - profile.startTime) / 1000,
    busyMs: busy / 1000,
    topFunctions: top(fns).map(([name, us]) => ({ name, selfMs: ms(us) })),
    topFiles: top(files).map(([file, us]) => ({ file, selfMs: ms(us) })),
    topModules: top(mods).map(([module, us]) => ({ module, selfMs: ms(us) })),
  };
}
