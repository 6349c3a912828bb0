import type { Config } from '../env';
import { type EffectRuntimeConfig, effectConfig } from './types';

/** Runtime settings from the environment (EFFECT_* variables, all with defaults). */
export function effectConfigFrom(config: Config): EffectRuntimeConfig {
  const c = config as Config & Partial<Record<'EFFECT_STALE_AFTER_MS' | 'EFFECT_CLAIM_SCAN_LIMIT', number>>;
  return effectConfig({
    ...(c.EFFECT_STALE_AFTER_MS ? { staleAfterMs: c.EFFECT_STALE_AFTER_MS } : {}),
    ...(c.EFFECT_CLAIM_SCAN_LIMIT ? { claimScanLimit: c.EFFECT_CLAIM_SCAN_LIMIT } : {}),
  });
}

/** Heartbeat cadence while a host holds claims: well inside the staleness floor. */
export function heartbeatEveryMs(config: EffectRuntimeConfig): number {
  return Math.max(1000, Math.floor(config.staleAfterMs / 3));
}
