import type { Config } from '../env';
import { effectRegistry } from './registry';
import { type EffectRuntimeConfig, effectConfig } from './types';

/** Runtime settings from the environment (EFFECT_* variables, all with defaults). */
export function effectConfigFrom(config: Config): EffectRuntimeConfig {
  return effectConfig({
    staleAfterMs: config.EFFECT_STALE_AFTER_MS,
    claimScanLimit: config.EFFECT_CLAIM_SCAN_LIMIT,
    mailboxMaxAttempts: config.EFFECT_MAILBOX_MAX_ATTEMPTS,
    // Read when the config is built: features register their executors at module load.
    takeoverKinds: effectRegistry.takeoverKinds(),
  });
}

/**
 * The longest a host holding claims goes without an alarm. Durable Object alarms survive a
 * restart, and a restarted host takes over its predecessor's idempotent claims in its first
 * pump, so this bounds the reply's delay after a deploy or crash (issue 31 item 4: within 5 s).
 */
export const RESTART_PICKUP_MS = 4000;

/**
 * Heartbeat cadence while a host holds claims: well inside the staleness floor, and never
 * longer than RESTART_PICKUP_MS (the same alarm is a restarted host's first pump).
 */
export function heartbeatEveryMs(config: EffectRuntimeConfig): number {
  return Math.max(1000, Math.min(RESTART_PICKUP_MS, Math.floor(config.staleAfterMs / 3)));
}
