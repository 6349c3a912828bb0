import { writeFileSync } from 'node:fs';
import WebSocket from 'ws';

/**
 * A CPU profile of the Worker's isolate in `wrangler dev`, through wrangler's inspector
 * (Chrome DevTools protocol over a WebSocket; `--inspector-port`). The Worker and its
 * Durable Objects share the isolate locally, so the profile covers the answer path, the
 * post-answer work and the actor hosts together. Written as a `.cpuprofile` (DevTools opens
 * it) and summarised as self time per function and per source file.
 */
interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
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
  await send('Profiler.enable');
  await send('Profiler.setSamplingInterval', { interval: samplingIntervalUs });
  await send('Profiler.start');
  return {
    async stop(file) {
      const { profile } = (await send('Profiler.stop')) as { profile: Profile };
      socket.close();
      writeFileSync(file, JSON.stringify(profile));
      return summarise(profile);
    },
  };
}

function summarise(profile: Profile): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  for (let i = 0; i < samples.length; i++) {
    // Each delta is the time before sample i; attribute the next delta to sample i.
    const us = deltas[i + 1] ?? 0;
    selfUs.set(samples[i]!, (selfUs.get(samples[i]!) ?? 0) + us);
  }
  const fns = new Map<string, number>();
  const files = new Map<string, number>();
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
  }
  const top = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).slice(0, 25);
  return {
    wallMs: (profile.endTime - profile.startTime) / 1000,
    busyMs: busy / 1000,
    topFunctions: top(fns).map(([name, us]) => ({ name, selfMs: Math.round(us / 100) / 10 })),
    topFiles: top(files).map(([file, us]) => ({ file, selfMs: Math.round(us / 100) / 10 })),
  };
}
