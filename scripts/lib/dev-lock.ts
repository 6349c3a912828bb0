import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';

/** One `npm run dev` per checkout: a pid file, honoured only while that pid is alive. */
export function acquireDevLock(path: string): () => void {
  if (existsSync(path)) {
    const pid = Number(readFileSync(path, 'utf8'));
    if (pid && isAlive(pid)) {
      throw new Error(`npm run dev is already running (pid ${pid}). Stop it with Ctrl-C first.`);
    }
  }
  writeFileSync(path, String(process.pid));
  return () => rmSync(path, { force: true });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
