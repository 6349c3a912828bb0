import type { TestProject } from 'vitest/node';
import { startTestStack } from './stack';

declare module 'vitest' {
  export interface ProvidedContext {
    adminUrl: string;
    databaseUrl: string;
    wsProxy: string;
  }
}

export default async function setup(project: TestProject) {
  const stack = await startTestStack();
  project.provide('adminUrl', stack.adminUrl);
  project.provide('databaseUrl', stack.databaseUrl);
  project.provide('wsProxy', stack.wsProxy);
  return () => stack.stop();
}
