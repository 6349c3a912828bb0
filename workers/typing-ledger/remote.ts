import type { Deadline } from '../clock';
import type { LarkClient } from '../lark/client';
import { LarkApiError } from '../lark/errors';
import { TYPING_EMOJI } from './types';

/**
 * What one remote withdrawal concluded. `gone`: the badge is confirmed absent (deleted now,
 * or Lark says the message/reaction is already gone: 231003/230110/231010/231011 and the
 * client's other already-gone codes). `not_found`: a sweep listed every page and found none
 * of ours, which cannot prove an unfinished Add will not still land.
 */
export type RemoteOutcome =
  | { kind: 'gone'; deleted: number }
  | { kind: 'not_found' }
  | { kind: 'found'; reactionIds: string[] }
  | { kind: 'retryable'; code: number; retryAfterSeconds?: number }
  | { kind: 'permanent'; code: number };

/**
 * What Lark's answer means for the badge. Anything that is not a Lark answer (a TypeError,
 * a database error) is rethrown: it is a bug or an outage of ours, never a Lark failure.
 */
export function failure(err: unknown): RemoteOutcome {
  if (!(err instanceof LarkApiError)) throw err;
  if (err.kind === 'already_gone') return { kind: 'gone', deleted: 0 };
  if (err.kind === 'retryable')
    return {
      kind: 'retryable',
      code: err.code || err.httpStatus,
      retryAfterSeconds: err.retryAfterSeconds,
    };
  return { kind: 'permanent', code: err.code || err.httpStatus };
}

/** Precise delete by reaction ID. */
export async function deleteExact(
  client: LarkClient,
  messageId: string,
  reactionId: string,
  deadline: Deadline,
): Promise<RemoteOutcome> {
  try {
    await client.deleteReaction(messageId, reactionId, { deadline });
    return { kind: 'gone', deleted: 1 };
  } catch (err) {
    return failure(err);
  }
}

/**
 * Lists the message's `Typing` reactions to the last page, within the budget, and returns
 * only ours: operator_type 'app' AND operator_id equal to this installation's App ID.
 * Humans' and other apps' badges never appear in the result. An unfinished listing is
 * retryable: a partial view never acknowledges anything.
 */
export async function findOurTyping(
  client: LarkClient,
  messageId: string,
  appId: string,
  deadline: Deadline,
): Promise<RemoteOutcome> {
  const ours: string[] = [];
  let pageToken: string | undefined;
  try {
    for (let page = 0; page < 200; page++) {
      if (deadline.expired()) return { kind: 'retryable', code: 0 };
      const res = await client.listReactions(
        messageId,
        { reactionType: TYPING_EMOJI, pageToken, pageSize: 50 },
        { deadline },
      );
      for (const r of res.items ?? [])
        if (
          r.operator?.operator_type === 'app' &&
          r.operator?.operator_id === appId &&
          r.reaction_type?.emoji_type === TYPING_EMOJI
        )
          ours.push(r.reaction_id);
      if (!res.has_more) return ours.length ? { kind: 'found', reactionIds: ours } : { kind: 'not_found' };
      pageToken = res.page_token ?? undefined;
      if (!pageToken) return { kind: 'retryable', code: 0 };
    }
    return { kind: 'retryable', code: 0 };
  } catch (err) {
    return failure(err);
  }
}

/** Sweep: find ours, then delete each precisely. `not_found` when there was nothing of ours. */
export async function sweepOurTyping(
  client: LarkClient,
  messageId: string,
  appId: string,
  deadline: Deadline,
): Promise<RemoteOutcome> {
  const found = await findOurTyping(client, messageId, appId, deadline);
  if (found.kind !== 'found') return found;
  return deleteFound(client, messageId, found.reactionIds, deadline);
}

/** Deletes each reaction a sweep found, precisely; the first failure is the outcome. */
export async function deleteFound(
  client: LarkClient,
  messageId: string,
  reactionIds: string[],
  deadline: Deadline,
): Promise<RemoteOutcome> {
  let deleted = 0;
  for (const id of reactionIds) {
    const r = await deleteExact(client, messageId, id, deadline);
    if (r.kind !== 'gone') return r;
    deleted += r.deleted;
  }
  return { kind: 'gone', deleted };
}
