import type { Pool } from '@neondatabase/serverless';
import { actorHostStub } from '../effects/actor-host-stub';
import type { Config, Env } from '../env';
import type { Installation } from '../installations/store';
import type { MessageReceiveEvent } from '../lark/schemas';
import { log } from '../log';
import './engine';
import { afterInputAnswered, type TypingInput, type TypingRegistration } from './typing-hooks';

/** One accepted `im.message.receive_v1` from a user, already verified and de-duplicated. */
export interface InboundMessage {
  installation: Installation;
  eventId: string;
  event: MessageReceiveEvent;
  /** Worker clock when the request arrived. */
  receivedAtMs: number;
}

/** What the transaction recorded, for the work after the answer. */
export interface RecordedInput {
  typing: TypingInput;
  registration: TypingRegistration;
}

/**
 * Runs after the 200, through `executionCtx.waitUntil`, only for a newly recorded input:
 * wakes the conversation's ActorHost (the commit is done, so it sees the input) and lets
 * the ledger send the Typing Add on the request's own pool (`pool`, still open: the webhook
 * ends it as soon as `dbDone` settles, without waiting for the wake-up, whose RPC returns
 * only when the host's pump is done). A lost wake-up is recovered by the minute cron's
 * mailbox polling. Never throws.
 */
export function afterInboundAnswered(
  env: Env,
  config: Config,
  recorded: RecordedInput,
  pool?: Pool,
): { dbDone: Promise<void>; done: Promise<void> } {
  const { sessionId } = recorded.typing;
  const woken = actorHostStub(env, sessionId)
    .wake(sessionId)
    .then(
      () => undefined,
      (err: unknown) => log.warn('channel_wake_failed', { sessionId, error: err }),
    );
  // Never throws: it logs its own failures (`typing_add_error`).
  const dbDone = afterInputAnswered(
    config,
    { input: recorded.typing, registration: recorded.registration },
    pool,
  );
  return { dbDone, done: Promise.all([woken, dbDone]).then(() => undefined) };
}
