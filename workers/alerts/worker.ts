/**
 * reaction-ledger-alerts' entry module (alerts.wrangler.toml): the tail handler and the AlertGate
 * Durable Object. An entry module may export only handlers and classes; the work is in tail.ts.
 */
import { log } from '../log';
import type { AlertsEnv } from './config';
import { handleTail } from './tail';

export { AlertGate } from './gate-object';

export default {
  async tail(events, env) {
    try {
      await handleTail(events, env);
    } catch (err) {
      // Nothing above should throw; if it does, the alert is lost and said so, once.
      log.error('alert_tail_failed', { error: err });
    }
  },
} satisfies ExportedHandler<AlertsEnv>;
