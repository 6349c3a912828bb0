// The effect runtime's public API. See docs/effects.md.
export { type ActorCommit, commitActor } from './commit';
export { EffectStage, type EmitOptions, MAX_EFFECT_TIMEOUT_MS, type StagedEffect } from './emit';
export { instanceIdOf, newEffectId } from './ids';
export {
  type InstancePruneReport,
  type InstanceRetention,
  type InstanceRetentionRule,
  MIN_INSTANCE_IDLE_MS,
  pruneIdleInstances,
} from './instance-retention';
export {
  enqueueMessage,
  ensureInstance,
  instancesWithWork,
  loadInstance,
  pendingMessages,
  pruneMailbox,
  recordFailedDelivery,
  unrunnableInstancesWithWork,
} from './mailbox';
export { heartbeat, pruneProcesses, registerProcess, stopProcess } from './processes';
export {
  processRecoveryChecks,
  pruneEffects,
  pruneExpiredBindings,
  pruneRecoveryChecks,
  requestEffectRecovery,
  runRecoveryPass,
  staleCandidates,
  type WakeFn,
} from './recovery';
export { decideRecovery, type RecoveryOutcome } from './recovery-decide';
export * from './registry';
export { drainInstance, drainStep, runClaimedEffects } from './runner';
export { claimEffects, completeEffects, failEffects } from './scheduler';
export * from './types';
