/** @reaction-ledger/mobile-client: offline journal, replay and localized recovery for /v1 reactions. */
export type * from './api-types';
export * from './catalogue';
export {
  ReactionClient,
  type ReactionClientOptions,
  type Session,
  type SessionState,
  type SyncReport,
} from './client';
export { DISPOSITION, type Disposition, dispositionOf, type TerminalKind } from './dispositions';
export { type EntryStatus, type JournalEntry, type Outcome, statusOf, type Terminal } from './entry';
export { Journal } from './journal';
export type { BackoffOptions } from './replay';
export { ManualScheduler, type Scheduler, systemScheduler } from './scheduler';
export { type KeyValueStore, MemoryStore } from './storage';
export type { ApiResult, FetchLike } from './transport';
