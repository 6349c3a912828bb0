import { execFile, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { promisify } from 'node:util';

/**
 * The previous release's source tree, for the tests and the chaos fault that run two versions
 * against one database (docs/operations.md "Two versions at once"). `scripts/previous-release.json`
 * names it: a tag once releases exist, a recorded commit until then. The tree is `git archive`d
 * into a temporary directory (nothing of this checkout changes) and given this checkout's
 * node_modules: a release builds with the toolchain it pinned, and the toolchain only moves in
 * a release of its own, so the two agree for the releases this compares.
 */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const RECORD = join(ROOT, 'scripts/previous-release.json');

export interface PreviousRelease {
  /** The commit (a clone without tags finds it too). */
  ref: string;
  /** Its release tag, for people. */
  tag?: string;
  why: string;
}

export async function previousRelease(): Promise<PreviousRelease> {
  return JSON.parse(await readFile(RECORD, 'utf8')) as PreviousRelease;
}

export interface ReleaseTree {
  ref: string;
  root: string;
  remove(): Promise<void>;
}

/** Extracts `ref` (default: the recorded previous release). Fails loudly when the clone lacks it. */
export async function releaseTree(ref?: string): Promise<ReleaseTree> {
  const wanted = ref ?? (await previousRelease()).ref;
  await promisify(execFile)('git', ['-C', ROOT, 'cat-file', '-e', `${wanted}^{commit}`]).catch(() => {
    throw new Error(
      `previous release ${wanted} is not in this clone (a shallow clone?): fetch it, the two-version test needs it`,
    );
  });
  const root = await mkdtemp(join(tmpdir(), 'reaction-ledger-release-'));
  await new Promise<void>((resolve, reject) => {
    const archive = spawn('git', ['-C', ROOT, 'archive', '--format=tar', wanted], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const tar = spawn('tar', ['-x', '-C', root], { stdio: ['pipe', 'inherit', 'inherit'] });
    archive.stdout.pipe(tar.stdin);
    let failed = false;
    const fail = (what: string) => (code: number | null) => {
      if (code !== 0 && !failed) {
        failed = true;
        reject(new Error(`${what} of ${wanted} exited ${code}`));
      }
    };
    archive.on('exit', fail('git archive'));
    tar.on('exit', (code) => {
      fail('tar')(code);
      if (code === 0 && !failed) resolve();
    });
  });
  await symlink(join(ROOT, 'node_modules'), join(root, 'node_modules'), 'dir');
  return { ref: wanted, root, remove: () => rm(root, { recursive: true, force: true }) };
}
