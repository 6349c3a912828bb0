/** The typing-reaction ledger (docs/typing-ledger.md). */
export { type AddOptions, type AddOutcome, addTypingBadge, type InputLiveCheck } from './add';
export { sweepDeliveryAnchor } from './anchor';
export {
  prepareRegistration,
  REGISTER_RESULT_COLUMNS,
  type RegisterInput,
  type RegisterResultRow,
  type RegisterSql,
  type Registration,
  registerCtes,
  registerInput,
  registrationOutcome,
} from './register';
export { markInputsTasked, settleRecalledInput, settleTurnInputs, type TurnCutoff } from './settle';
export { openSnapshot, sealSnapshot } from './snapshot';
export { recordCleaned } from './store';
export * from './types';
export {
  type AfterCommitOutcome,
  settledRowIds,
  type WithdrawOptions,
  type WithdrawResult,
  withdrawAfterCommit,
  withdrawRow,
} from './withdraw';
