import { z } from '@hono/zod-openapi';
import { ERROR_STATUS } from '../errors';
import { isPgStorable } from '../lib/pg-text';
import { operationStampMs } from './operation-id';
import { normalizeEmoji } from './types';

/** zod schemas of the /v1 reaction API: they validate requests and generate /v1/openapi.json. */
const Id = z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/);
export const OperationId = z
  .string()
  .regex(/^[A-Za-z0-9_-]{8,64}$/)
  .openapi({
    description: 'Client-chosen operation ID (a UUID works); one per reaction choice',
    example: '3f8b0c1e-6a3e-4bd6-9c1a-0f0f2b7c9d11',
  });

export const Emoji = z
  .string()
  .min(1)
  .max(64)
  .transform((raw) => normalizeEmoji(raw))
  .refine(
    (e) => e.length >= 1 && e.length <= 64 && !/[\s\p{Cc}]/u.test(e) && isPgStorable(e),
    'a single emoji or shortcode',
  )
  .openapi({ description: 'Normalized (NFC, variation selectors removed) before binding', example: '👍' });

export const Desired = z
  .enum(['present', 'absent'])
  .openapi({ description: 'Desired state of the reaction' });

export const IntentBody = z.object({ messageId: Id, emoji: Emoji, desired: Desired });

/**
 * A new ticket needs an operation ID that carries its creation time (UUIDv7, stamped when the
 * choice was made): the server admits an operation only inside the window after that stamp.
 */
export const StampedOperationId = OperationId.refine((id) => operationStampMs(id) !== null, {
  message: 'operationId must be a UUIDv7 stamped when the choice was made',
}).openapi({
  description:
    'UUIDv7 minted when the user made the choice (its first 48 bits are the creation time, Unix ms, on the ' +
    "client's estimate of server time); one per reaction choice, never re-stamped",
  example: '01937a4e-8c2b-7d3e-9c1a-0f0f2b7c9d11',
});

export const TicketRequest = IntentBody.extend({ operationId: StampedOperationId })
  .strict()
  .openapi('TicketRequest');

export const Ticket = z
  .object({
    ticket: z
      .string()
      .openapi({ description: 'Opaque, actor-bound; send it with the write or the retirement' }),
    operationId: z.string(),
    intent: z.object({ messageId: z.string(), emoji: z.string(), desired: Desired }),
    issuedAt: z.string(),
    expiresAt: z
      .string()
      .openapi({ description: 'Absolute server expiry; after it the operation is terminal (410)' }),
    replayed: z.boolean(),
  })
  .openapi('Ticket');

const TicketToken = z.string().min(1).max(200);

export const WriteRequest = IntentBody.extend({
  ticket: TicketToken.optional().openapi({ description: 'Required unless the legacy contract is open' }),
})
  .strict()
  .openapi('ReactionWrite');

export const RetireRequest = z
  .object({
    ticket: TicketToken.optional().openapi({ description: 'Required unless the legacy contract is open' }),
  })
  .strict()
  .openapi('ReactionRetire');

export const ToggleRequest = z.object({ emoji: Emoji }).strict().openapi('ReactionToggle');

export const MessageReactions = z
  .object({
    messageId: z.string(),
    reactionVersion: z.number().int(),
    reactions: z.array(
      z.object({ emoji: z.string(), count: z.number().int(), actorIds: z.array(z.string()) }),
    ),
  })
  .openapi('MessageReactions');

export const Receipt = z
  .object({
    operationId: z.string(),
    messageId: z.string(),
    emoji: z.string(),
    desired: Desired,
    outcome: z.enum(['added', 'removed', 'unchanged']),
    reactionVersion: z.number().int(),
    contract: z.enum(['ticket', 'legacy']),
    appliedAt: z.string(),
  })
  .openapi('Receipt');

export const WriteResult = z
  .object({ receipt: Receipt, replayed: z.boolean(), message: MessageReactions })
  .openapi('ReactionWriteResult');

export const RetireResult = z
  .object({
    status: z.enum(['retired', 'applied']),
    operationId: z.string(),
    retiredAt: z.string().optional(),
    receipt: Receipt.optional(),
    message: MessageReactions.nullable(),
  })
  .openapi('ReactionRetireResult');

export const ToggleResult = z
  .object({ outcome: z.enum(['added', 'removed', 'unchanged']), message: MessageReactions })
  .openapi('ReactionToggleResult');

export const ErrorBody = z
  .object({
    error: z.object({
      code: z.enum(
        Object.keys(ERROR_STATUS) as [keyof typeof ERROR_STATUS, ...(keyof typeof ERROR_STATUS)[]],
      ),
      message: z.string(),
      requestId: z.string(),
      details: z.unknown().optional(),
    }),
  })
  .openapi('Error');

/** The one error shape, documented per status with the codes a client can switch on. */
export function errors(...statuses: number[]) {
  const out: Record<
    number,
    { description: string; content: { 'application/json': { schema: typeof ErrorBody } } }
  > = {};
  for (const status of statuses) {
    const codes = Object.entries(ERROR_STATUS)
      .filter(([, s]) => s === status)
      .map(([code]) => code);
    out[status] = {
      description: `Error: ${codes.join(', ')}`,
      content: { 'application/json': { schema: ErrorBody } },
    };
  }
  return out;
}

export const MessageParams = z.object({
  messageId: Id.openapi({ param: { name: 'messageId', in: 'path' } }),
});
export const OperationParams = z.object({
  operationId: OperationId.openapi({ param: { name: 'operationId', in: 'path' } }),
});
