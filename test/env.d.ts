import type { Env as WorkerEnv } from '../workers/env';

declare global {
  namespace Cloudflare {
    interface GlobalProps {
      mainModule: typeof import('../workers/index');
    }
    interface Env extends WorkerEnv {}
  }
}
