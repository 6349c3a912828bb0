import { readFileSync } from 'node:fs';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * `npm ci` runs a dependency's install script only when package.json's `allowScripts` allows
 * it, and warns about every one it does not cover (npm 11). Every package of the lockfile with
 * an install script, on any platform, is decided there (true: it needs it; false: it does not,
 * docs/toolchain.md "Install scripts" says why for each), and every entry names a package the
 * lockfile has, so a first `npm ci` prints no such warning and no entry outlives its package.
 */
const read = (file: string) =>
  JSON.parse(readFileSync(fileURLToPath(new URL(`../../../${file}`, import.meta.url)), 'utf8'));
const pkg = read('package.json') as { allowScripts: Record<string, boolean> };
const lock = read('package-lock.json') as {
  packages: Record<string, { hasInstallScript?: boolean; name?: string }>;
};

/** `node_modules/a/node_modules/@s/b` → `@s/b`. */
const nameOf = (path: string) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length);

describe('install scripts', () => {
  it('npm.install_scripts_decided: every lockfile package with an install script is allowed or denied in allowScripts', () => {
    const withScripts = new Set(
      Object.entries(lock.packages)
        .filter(([path, p]) => path && p.hasInstallScript)
        .map(([path]) => nameOf(path)),
    );
    expect([...withScripts].filter((name) => !(name in pkg.allowScripts))).toEqual([]);
    const inLock = new Set(Object.keys(lock.packages).filter(Boolean).map(nameOf));
    expect(Object.keys(pkg.allowScripts).filter((name) => !inLock.has(name))).toEqual([]);
  });
});
