import { z } from '@hono/zod-openapi';
import { ERROR_STATUS, type ErrorCode } from '../errors';
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

/**
 * The one error shape, documented per route with only the codes that route can answer,
 * grouped by status (issue 29 hole 13: every status listed every code of its status, Lark,
 * console and typing codes included). test/reaction-tickets/openapi.errors.test.ts checks the
 * lists against the answers, and the /v1 fuzz group checks every answer it gets against them.
 */
export function errors(...codes: ErrorCode[]) {
  const out: Record<number, { description: string; content: { 'application/json': { schema: z.ZodType } } }> =
    {};
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes)
    byStatus.set(ERROR_STATUS[code], [...(byStatus.get(ERROR_STATUS[code]) ?? []), code]);
  for (const [status, list] of [...byStatus].sort((a, b) => a[0] - b[0]))
    out[status] = {
      description: `Error: ${list.join(', ')}`,
      content: {
        'application/json': {
          schema: z.object({
            error: z.object({
              code: z.enum(list as [ErrorCode, ...ErrorCode[]]),
              message: z.string(),
              requestId: z.string(),
              details: z.unknown().optional(),
            }),
          }),
        },
      },
    };
  return out;
}

/** What every authenticated /v1 route can answer, whatever it does. */
export const COMMON_ERRORS: ErrorCode[] = [
  'validation_failed',
  'unauthorized',
  'rate_limited',
  'service_unavailable',
];
/** And every route that takes a JSON body. */
export const BODY_ERRORS: ErrorCode[] = ['bad_request', 'payload_too_large', 'unsupported_media_type'];
/** What a ticketed call answers besides those, the write and the retirement alike (ticket-call.ts). */
export const TICKETED_CALL_ERRORS: ErrorCode[] = [
  'ticket_invalid',
  'not_found',
  'intent_mismatch',
  'operation_retired',
  'ticket_required',
  'operation_expired',
  'operation_outcome_unknown',
  'legacy_contract_closed',
];

export const MessageParams = z.object({
  messageId: Id.openapi({ param: { name: 'messageId', in: 'path' } }),
});
export const OperationParams = z.object({
  operationId: OperationId.openapi({ param: { name: 'operationId', in: 'path' } }),
});
