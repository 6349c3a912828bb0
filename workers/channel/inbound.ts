import type { Installation } from '../installations/store';
import type { MessageReceiveEvent } from '../lark/schemas';
import type { TypingInput, TypingRegistration } from './typing-hooks';

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
