/**
 * `npm run deploy -- [--dry-run] [--env staging] [--percentages 10,50,100] [--soak-seconds 60]
 * [--yes] [--env-file <file>] [--no-lark-smoke]`: one release of the three Workers, from the
 * environment check to the last traffic step (README "Deploy", docs/operations.md "Deploy").
 * The plan is scripts/lib/deploy-plan.ts, the steps scripts/lib/deploy-runner.ts; this file is the
 * command line and the real I/O: child processes with a timeout, fetch with a timeout, a prompt.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { fileURLToPath } from 'node:url';
import { parseEnv } from 'node:util';
import { parseDeployArgs, USAGE, UsageError } from './lib/deploy-plan';
import { type Command, type CommandResult, type DeployIo, runDeploy } from './lib/deploy-runner';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** After the timeout: SIGTERM, then SIGKILL if the process is still there this much later. */
const KILL_GRACE_MS = 5000;

function run(command: Command, fileEnv: Record<string, string>): Promise<CommandResult> {
  const outDir = command.wranglerOutput ? mkdtempSync(join(tmpdir(), 'reaction-ledger-wrangler-out-')) : null;
  const outFile = outDir ? join(outDir, 'output.ndjson') : null;
  return new Promise((resolve) => {
    const child = spawn(command.file, command.args, {
      cwd: root,
      env: {
        ...process.env,
        ...fileEnv,
        ...command.env,
        ...(outFile ? { WRANGLER_OUTPUT_FILE_PATH: outFile } : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    // wrangler's progress and errors stay visible as they come; stdout is parsed by the runner.
    child.stdout.on('data', (d: Buffer) => {
      stdout += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
      process.stderr.write(d);
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), KILL_GRACE_MS).unref();
    }, command.timeoutMs);
    const finish = (code: number) => {
      clearTimeout(timer);
      let outputs: Record<string, unknown>[] = [];
      if (outFile && existsSync(outFile))
        outputs = readFileSync(outFile, 'utf8')
          .split('\n')
          .filter((l) => l.trim())
          .map((l) => JSON.parse(l) as Record<string, unknown>);
      if (outDir) rmSync(outDir, { recursive: true, force: true });
      resolve({ code, stdout, stderr, timedOut, outputs });
    };
    child.on('error', (err) => {
      stderr += `${err.message}\n`;
      finish(127);
    });
    child.on('close', (code) => finish(code ?? 1));
  });
}

const io = (fileEnv: Record<string, string>): DeployIo => ({
  run: (command) => run(command, fileEnv),
  async http(request, timeoutMs) {
    const res = await fetch(request.url, {
      method: request.method,
      headers: request.headers,
      body: request.body,
      redirect: 'manual',
      signal: AbortSignal.timeout(timeoutMs),
    });
    return { status: res.status, headers: res.headers, body: await res.text() };
  },
  sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
  now: () => Date.now(),
  log: (line) => console.log(line),
  async confirm(question) {
    if (!process.stdin.isTTY) return false;
    const rl = createInterface({ input: process.stdin, output: process.stdout });
    try {
      return /^y(es)?$/i.test((await rl.question(`${question} [y/N] `)).trim());
    } finally {
      rl.close();
    }
  },
});

function release(): string {
  try {
    return execFileSync('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
  } catch {
    // Not a git checkout (an unpacked tarball): the release is still deployable, just unnamed.
    return 'unknown-commit';
  }
}

let options: ReturnType<typeof parseDeployArgs>;
try {
  options = parseDeployArgs(process.argv.slice(2));
} catch (err) {
  if (!(err instanceof UsageError)) throw err;
  console.error(`deploy: ${err.message}\n${USAGE}`);
  process.exit(2);
}
const fileEnv = options.envFile
  ? (parseEnv(readFileSync(options.envFile, 'utf8')) as Record<string, string>)
  : {};
const result = await runDeploy({
  options,
  // The file's values win over the shell's: a staging file must never deploy with production's.
  env: { ...process.env, ...fileEnv },
  root,
  release: release(),
  io: io(fileEnv),
});
process.exitCode = result.ok ? 0 : 1;
