import { z } from 'zod';

/**
 * The agent contract (docs/channel.md "Agents"), as schemas: what this service POSTs to
 * `AGENT_URL`, and the two answers it accepts (protocol v1 `{"text"}`, protocol v2's event
 * stream, stream.ts). docs/agent-protocol.schema.json is generated from these
 * (`npx tsx scripts/agent-schema.ts`); a test fails when the two drift.
 */
export const AgentRequestBody = z
  .object({
    session_id: z.string().describe('the conversation (one Lark chat, or one thread of it)'),
    turn: z.number().int().min(1).describe('turn number within the session'),
    generation: z
      .number()
      .int()
      .min(1)
      .describe('attempt of this turn: a replacement after a failure or a crash is a new generation'),
    context_revision: z.number().int().min(0),
    inputs: z
      .array(
        z.object({
          position: z.number().int().min(1),
          message_id: z.string(),
          sender_open_id: z.string().nullable(),
          text: z.string(),
        }),
      )
      .describe('every coalesced input, oldest first; the last one is the message replied to'),
  })
  .describe(
    'POST body of every agent request (signed: x-agent-timestamp, x-agent-signature, idempotency-key)',
  );
export type AgentRequestBody = z.infer<typeof AgentRequestBody>;

/** Protocol v1: one JSON answer. */
export const AgentJsonAnswer = z.object({ text: z.string().min(1) }).describe('application/json answer');

/** Protocol v2: one event of an `application/x-ndjson` or `text/event-stream` answer. */
export const AgentEvent = z
  .discriminatedUnion('type', [
    z.object({ type: z.literal('delta'), text: z.string() }).describe('more text, appended'),
    z
      .object({ type: z.literal('status'), status: z.string().max(200) })
      .describe('progress, never reply text'),
    z
      .object({ type: z.literal('done'), text: z.string().min(1) })
      .describe('the whole answer; nothing may follow'),
    z
      .object({
        type: z.literal('error'),
        code: z.string().max(100).optional(),
        message: z.string().max(500).optional(),
      })
      .describe('the agent gave up on this turn'),
  ])
  .describe('one event of a streamed answer');
export type AgentEvent = z.infer<typeof AgentEvent>;

/** The JSON Schema document of the contract (draft 2020-12). */
export function agentContractSchema(): Record<string, unknown> {
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    title: 'reaction-ledger agent protocol',
    $defs: {
      request: z.toJSONSchema(AgentRequestBody),
      answer: z.toJSONSchema(AgentJsonAnswer),
      event: z.toJSONSchema(AgentEvent),
    },
  };
}
