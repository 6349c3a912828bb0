import type { LarkApiError } from '../lark/errors';
import { log } from '../log';
import type { ReplyArgs, ReplyResult } from './types';

// What a reply run reports when Lark did not take the reply, whatever its kind (text or card).

/**
 * A reply Lark's rate limit held back (nothing was posted): the conversation runs the same
 * generation again at the reset, and that run fails once the turn is past its deadline.
 */
export function held(args: ReplyArgs, retryAfterMs: number): ReplyResult {
  log.warn('channel_reply_rate_limited', {
    sessionId: args.sessionId,
    turnNo: args.turnNo,
    generation: args.generation,
    retryAfterMs,
  });
  return { outcome: 'held', replyMessageId: null, reason: 'lark_rate_limited', retryAfterMs };
}

/** Lark refused the reply for good (retrying cannot change it): logged once, the turn settles. */
export function notDelivered(args: ReplyArgs, err: LarkApiError): ReplyResult {
  log.warn('channel_reply_not_delivered', {
    sessionId: args.sessionId,
    turnNo: args.turnNo,
    kind: err.kind,
    larkCode: err.code,
  });
  return {
    outcome: err.kind === 'already_gone' ? 'anchor_gone' : 'failed',
    replyMessageId: null,
    reason: `lark_${err.code}`,
  };
}

/** Every input of the turn was recalled before its reply was claimed: nothing is posted (reply-claim.ts). */
export function recalled(args: ReplyArgs): ReplyResult {
  log.info('channel_reply_recalled', {
    sessionId: args.sessionId,
    turnNo: args.turnNo,
    generation: args.generation,
  });
  return { outcome: 'recalled', replyMessageId: null, reason: 'inputs_recalled' };
}
