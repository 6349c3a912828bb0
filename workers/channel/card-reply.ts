import type { AgentReply } from '../agents';
import { Deadline } from '../clock';
import type { LarkClient } from '../lark/client';
import { LarkApiError, RATE_LIMITED_CODE } from '../lark/errors';
import { log } from '../log';
import { CardRefused, CardStream, type CardStreamDeps, cardJson } from './card-stream';
import { localeOf, notice } from './notices';
import { findCard, markFinished, reserveSequences, type TurnKey } from './reply-cards';
import { held, notDelivered } from './reply-results';
import type { ReplyArgs, ReplyResult } from './types';

export interface CardReplyInput {
  args: ReplyArgs;
  lark: LarkClient;
  db: CardStreamDeps['db'];
  uuid: string;
  /** The turn is past the uuid's dedup window (reply.ts REPLY_UUID_SAFE_MS). */
  pastDedup: boolean;
  signal: AbortSignal;
  /** Asks the agent; `onText` gets the text so far after each streamed delta. */
  ask: (onText: (textSoFar: string) => void) => Promise<AgentReply>;
}

/** The card could not be created at all (no CardKit scope, say): the reply goes out as text. */
export interface TextFallback {
  fallbackText: string;
}

/**
 * One generation of a `card_stream` reply. What an earlier writer of the turn left decides
 * where this one starts (docs/channel.md "Streaming cards", crash points):
 *  - a finished card: delivered already, the agent is not asked again;
 *  - a card recorded but not sent: sent by this run (the turn's uuid: at most once);
 *  - a sent card: continued with this generation's text (Lark replaces a text that is not a
 *    prefix of the new one) and finished;
 *  - nothing: created with the first text.
 * A generation that fails leaves the card streaming for the next one; the turn's settlement
 * finishes whatever is left unfinished (`finishInterruptedCard`).
 */
export async function cardReply(p: CardReplyInput): Promise<ReplyResult | TextFallback> {
  const { args } = p;
  const turn = {
    sessionId: args.sessionId,
    turnNo: args.turnNo,
    installationId: args.session.installationId,
    // The turn's language, recorded with the card for whoever finishes it (notices.ts).
    locale: localeOf(args.inputs.map((i) => i.text)),
  };
  const stream = await CardStream.open({
    lark: p.lark,
    db: p.db,
    turn,
    anchorMessageId: args.anchorMessageId,
    uuid: p.uuid,
    signal: p.signal,
  });
  const card = stream.recorded;
  if (card?.finished) return { outcome: 'delivered', replyMessageId: card.sentMessageId };
  // Sending needs the uuid's dedup (an earlier writer may have sent without recording it);
  // a card already recorded as sent is only updated, which needs no dedup.
  if (p.pastDedup && !card?.sentMessageId) {
    log.warn('channel_reply_past_dedup_window', {
      sessionId: args.sessionId,
      turnNo: args.turnNo,
      generation: args.generation,
    });
    return { outcome: 'failed', replyMessageId: null, reason: 'uuid_window_passed' };
  }
  let answer: AgentReply;
  try {
    answer = await p.ask((text) => stream.onText(text));
  } catch (err) {
    // The generation fails (the actor replaces it); the card stays for the next writer.
    await stream.settle();
    throw err;
  }
  try {
    const done = await stream.finish(answer.text);
    return { outcome: 'delivered', replyMessageId: done.sentMessageId };
  } catch (err) {
    if (err instanceof CardRefused && err.stage === 'create') {
      log.warn('channel_card_create_refused', {
        sessionId: args.sessionId,
        turnNo: args.turnNo,
        error: err.cause,
      });
      return { fallbackText: answer.text };
    }
    if (err instanceof CardRefused && err.cause instanceof LarkApiError) return notDelivered(args, err.cause);
    if (err instanceof CardRefused)
      return { outcome: 'failed', replyMessageId: null, reason: 'card_sequence_spent' };
    if (err instanceof LarkApiError && (err.httpStatus === 429 || err.code === RATE_LIMITED_CODE))
      return held(args, (err.retryAfterSeconds ?? 1) * 1000);
    throw err;
  }
}

/**
 * The settlement's half (`channel.turn-settled`): a card the turn's writers left streaming (a
 * failed or retired turn, or a writer that died between its finish call and its record) is
 * finished with the localized "interrupted" notice. Idempotent: a finished card is left alone,
 * and a second finish is a higher sequence over the same final state. A card never sent is
 * finished too: nobody sees it, and a sent one cannot be told apart from it here.
 */
export async function finishInterruptedCard(p: {
  lark: LarkClient;
  db: CardStreamDeps['db'];
  turn: TurnKey;
  delivered: boolean;
}): Promise<'none' | 'finished'> {
  const card = await p.db((q) => findCard(q, p.turn));
  if (!card || card.finished) return 'none';
  const block = await p.db((q) => reserveSequences(q, p.turn, 1));
  if (!block) return 'none';
  // A delivered turn whose finish record was lost: its final text is on the card already; the
  // interrupted notice would be untrue, so only streaming is turned off.
  const call = { deadline: new Deadline(5000) };
  if (p.delivered)
    await p.lark.setCardStreaming(card.cardId, { streaming: false, sequence: block.last }, call);
  else
    await p.lark.replaceCard(
      card.cardId,
      { card: cardJson(notice('interrupted', card.locale), false), sequence: block.last },
      call,
    );
  await p.db((q) => markFinished(q, p.turn));
  log.info('channel_card_finished_by_settlement', {
    sessionId: p.turn.sessionId,
    turnNo: p.turn.turnNo,
    delivered: p.delivered,
  });
  return 'finished';
}
