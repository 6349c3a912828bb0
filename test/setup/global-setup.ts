import type { TestProject } from 'vitest/node';
import { startLarkEmulator } from '../../emulator/server';
import { startTestStack } from './stack';

declare module 'vitest' {
  export interface ProvidedContext {
    adminUrl: string;
    databaseUrl: string;
    wsProxy: string;
    larkBase: string;
  }
}

export default async function setup(project: TestProject) {
  const stack = await startTestStack();
  project.provide('adminUrl', stack.adminUrl);
  project.provide('databaseUrl', stack.databaseUrl);
  project.provide('wsProxy', stack.wsProxy);
  // The Lark emulator, for the Worker's LARK_API_BASE and for tests that drive it over HTTP.
  const lark = await startLarkEmulator();
  project.provide('larkBase', lark.url);
  return async () => {
    await lark.close();
    await stack.stop();
  };
}
