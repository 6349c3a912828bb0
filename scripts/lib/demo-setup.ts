// The Lark demo installation for `npm run dev` and `npm run demo` (docs/channel.md).
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';

export const DEMO_FILE = fileURLToPath(new URL('../../.local/lark-demo.json', import.meta.url));

export interface LarkDemoOptions {
  /** The running Worker, e.g. http://127.0.0.1:8787. */
  serviceUrl: string;
  adminToken: string;
  /** The Lark emulator, e.g. http://127.0.0.1:8790. */
  emulatorUrl: string;
  /** Where the demo app's identity is kept between runs (default .local/lark-demo.json). */
  file?: string;
}

export interface LarkDemo {
  installationId: string;
  appId: string;
  workspaceId: string;
  chatId: string;
  webhookUrl: string;
  emulatorUrl: string;
}

interface Saved {
  installationId: string | null;
  appId: string;
  appSecret: string;
  verificationToken: string;
  encryptKey: string;
  workspaceId: string;
  chatId: string;
}

/**
 * Registers the demo app in the emulator (its memory is fresh each run) and, unless the
 * saved installation still exists, the installation through the admin API (signed and
 * encrypted events: an Encrypt Key is set); a kept installation is pointed at this emulator.
 * Idempotent; safe to call on every `npm run dev`.
 * The app's secrets stay in .local/ (mode 0600) and are never printed.
 */
export async function setupLarkDemo(opts: LarkDemoOptions): Promise<LarkDemo> {
  const file = opts.file ?? DEMO_FILE;
  const saved: Saved = existsSync(file)
    ? (JSON.parse(readFileSync(file, 'utf8')) as Saved)
    : {
        installationId: null,
        appId: `cli_demo${randomBytes(6).toString('hex')}`,
        appSecret: randomBytes(16).toString('hex'),
        verificationToken: randomBytes(16).toString('hex'),
        encryptKey: randomBytes(16).toString('hex'),
        workspaceId: 'ws_demo',
        chatId: `oc_demo${randomBytes(6).toString('hex')}`,
      };
  await call(`${opts.emulatorUrl}/__emulator/apps`, 'POST', {
    app_id: saved.appId,
    app_secret: saved.appSecret,
    verification_token: saved.verificationToken,
    encrypt_key: saved.encryptKey,
  });
  const admin = `${opts.serviceUrl}/admin/lark/installations`;
  const auth = { authorization: `Bearer ${opts.adminToken}` };
  const existing = saved.installationId
    ? await fetch(`${admin}/${saved.installationId}`, { headers: auth })
    : null;
  if (existing?.status === 200) {
    // The emulator follows PORT: after a change of PORT the kept installation still points
    // at the old address, and every Typing Add and reply would go nowhere.
    const { installation } = (await existing.json()) as { installation: { api_base: string } };
    if (installation.api_base !== opts.emulatorUrl) {
      const res = await fetch(`${admin}/${saved.installationId}/rotate`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ api_base: opts.emulatorUrl }),
      });
      if (res.status !== 200)
        throw new Error(`pointing the demo installation at the emulator: HTTP ${res.status}`);
    }
  } else {
    const res = await fetch(admin, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({
        workspace_id: saved.workspaceId,
        app_id: saved.appId,
        app_secret: saved.appSecret,
        verification_token: saved.verificationToken,
        encrypt_key: saved.encryptKey,
        api_base: opts.emulatorUrl,
      }),
    });
    if (res.status !== 201) throw new Error(`registering the demo installation: HTTP ${res.status}`);
    saved.installationId = ((await res.json()) as { installation: { id: string } }).installation.id;
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, JSON.stringify(saved, null, 2), { mode: 0o600 });
  }
  return {
    installationId: saved.installationId!,
    appId: saved.appId,
    workspaceId: saved.workspaceId,
    chatId: saved.chatId,
    webhookUrl: `${opts.serviceUrl}/lark/events/${saved.installationId}`,
    emulatorUrl: opts.emulatorUrl,
  };
}

async function call(url: string, method: string, body: unknown): Promise<unknown> {
  const res = await fetch(url, {
    method,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${method} ${new URL(url).pathname}: HTTP ${res.status}`);
  return res.json();
}
