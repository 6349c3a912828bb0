import type { Config } from '../env';
import { type EffectRuntimeConfig, effectConfig } from './types';

/** Runtime settings from the environment (EFFECT_* variables, all with defaults). */
export function effectConfigFrom(config: Config): EffectRuntimeConfig {
  return effectConfig({
    staleAfterMs: config.EFFECT_STALE_AFTER_MS,
    claimScanLimit: config.EFFECT_CLAIM_SCAN_LIMIT,
    mailboxMaxAttempts: config.EFFECT_MAILBOX_MAX_ATTEMPTS,
  });
}

/** Heartbeat cadence while a host holds claims: well inside the staleness floor. */
export function heartbeatEveryMs(config: EffectRuntimeConfig): number {
  return Math.max(1000, Math.floor(config.staleAfterMs / 3));
}
