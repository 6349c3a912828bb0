import { AppError } from '../errors';
import { AgentJsonAnswer as AgentAnswer, type AgentRequestBody } from './contract';
import {
  AGENT_PROTOCOL_VERSION,
  agentIdempotencyKey,
  agentSignature,
  IDEMPOTENCY_HEADER,
  PROTOCOL_HEADER,
  SIGNATURE_HEADER,
  TIMESTAMP_HEADER,
} from './signature';
import { readAgentStream, streamFormatOf } from './stream';
import { type Agent, type AgentTurn, MAX_REPLY_TEXT } from './types';

export interface HttpAgentOptions {
  url: string;
  timeoutMs: number;
  /** AGENT_SIGNING_SECRET: every request carries its signature (signature.ts). */
  signingSecret: string;
  fetch?: typeof fetch;
}

/**
 * An agent behind HTTP: `POST <AGENT_URL>` with the turn as JSON
 * (`{session_id, turn, generation, context_revision, inputs:[{position, message_id, sender_open_id, text}]}`),
 * answered by `{"text": "..."}`. Bounded by `timeoutMs` and the caller's signal. Signed
 * (`x-agent-timestamp`, `x-agent-signature: v1=<hex>`, signature.ts) and keyed
 * (`idempotency-key: <session_id>:<turn>:<generation>`): a retry of the same generation (after
 * a rate-limit hold, a lost answer) carries the same key, a replacement generation a new one;
 * the Lark post itself is deduplicated anyway.
 */
export function httpAgent(opts: HttpAgentOptions): Agent {
  const fetchFn = opts.fetch ?? ((input, init) => fetch(input, init));
  return {
    name: 'http',
    async reply(turn: AgentTurn, signal: AbortSignal, onText?: (textSoFar: string) => void) {
      const bounded = AbortSignal.any([signal, AbortSignal.timeout(opts.timeoutMs)]);
      const request: AgentRequestBody = {
        session_id: turn.sessionId,
        turn: turn.turnNo,
        generation: turn.generation,
        context_revision: turn.contextRevision,
        inputs: turn.inputs.map((i) => ({
          position: i.position,
          message_id: i.messageId,
          sender_open_id: i.senderOpenId,
          text: i.text,
        })),
      };
      const body = JSON.stringify(request);
      // Seconds, as Lark's own request timestamps are.
      const timestamp = Math.floor(Date.now() / 1000);
      const headers = {
        'content-type': 'application/json',
        // Protocol v2's streams (stream.ts), or today's {"text"} answer.
        accept: 'application/x-ndjson, text/event-stream, application/json',
        [TIMESTAMP_HEADER]: String(timestamp),
        [SIGNATURE_HEADER]: await agentSignature(opts.signingSecret, timestamp, body),
        [IDEMPOTENCY_HEADER]: agentIdempotencyKey(turn),
        [PROTOCOL_HEADER]: String(AGENT_PROTOCOL_VERSION),
      };
      let res: Response;
      try {
        res = await fetchFn(opts.url, { method: 'POST', headers, body, signal: bounded });
      } catch (err) {
        if (bounded.aborted)
          throw new AppError('agent_timeout', `agent did not answer within ${opts.timeoutMs} ms`);
        throw new AppError('agent_failed', `agent unreachable: ${err instanceof Error ? err.name : 'error'}`);
      }
      if (!res.ok) {
        // By design: a body that already broke has nothing left to close; the status decides.
        await res.body?.cancel().catch(() => undefined);
        throw new AppError('agent_failed', `agent answered HTTP ${res.status}`);
      }
      const format = streamFormatOf(res.headers.get('content-type'));
      if (format && res.body)
        try {
          return await readAgentStream(res.body, format, { maxChars: MAX_REPLY_TEXT, onText });
        } catch (err) {
          // The timeout (or the caller) aborted the read mid-stream: that is the agent's timeout.
          if (bounded.aborted)
            throw new AppError('agent_timeout', `agent did not finish within ${opts.timeoutMs} ms`);
          // The protocol's verdict (agent_stream_invalid, agent_failed) stands; anything else is
          // the connection breaking off mid-answer, the agent's failure.
          if (err instanceof AppError) throw err;
          throw new AppError(
            'agent_failed',
            `agent stream broke off: ${err instanceof Error ? err.name : 'error'}`,
          );
        }
      // By design: a body that is not JSON fails the shape check below (agent_failed).
      const parsed = AgentAnswer.safeParse(await res.json().catch(() => null));
      if (!parsed.success) throw new AppError('agent_failed', 'agent answer is not {"text": string}');
      return { text: parsed.data.text.slice(0, MAX_REPLY_TEXT) };
    },
  };
}
