import type { z } from 'zod';
import type { ErrorCode } from '../../../workers/errors';
import type * as S from '../../../workers/reaction-tickets/schemas';

/**
 * The /v1 wire types, inferred from the very zod schemas the server validates with and
 * publishes as /v1/openapi.json, so client and server cannot drift. Type-only imports:
 * nothing of the Worker (hono, zod-openapi, workerd) is bundled into the app.
 */
export type TicketRequest = z.input<typeof S.TicketRequest>;
export type Ticket = z.output<typeof S.Ticket>;
export type WriteRequest = z.input<typeof S.WriteRequest>;
export type WriteResult = z.output<typeof S.WriteResult>;
export type RetireRequest = z.input<typeof S.RetireRequest>;
export type RetireResult = z.output<typeof S.RetireResult>;
export type MessageReactions = z.output<typeof S.MessageReactions>;
export type Receipt = z.output<typeof S.Receipt>;
export type ErrorBody = z.output<typeof S.ErrorBody>;
export type Desired = z.output<typeof S.Desired>;
export type { ErrorCode };

/** One reaction choice: the canonical intent a ticket binds. */
export interface Intent {
  messageId: string;
  emoji: string;
  desired: Desired;
}

/** The `details` of a 410 operation_expired answer (see docs/mobile-api.md). */
export interface ExpiredDetails {
  operationId: string;
  expiredAt: string;
  receipt: Receipt | null;
  message: MessageReactions | null;
}
