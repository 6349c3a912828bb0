/** One input of a turn, as an agent sees it (no secrets, no Lark credentials). */
export interface AgentInput {
  position: number;
  messageId: string;
  senderOpenId: string | null;
  text: string;
}

export interface AgentTurn {
  sessionId: string;
  turnNo: number;
  /** Replacement generation of this turn's reply (1 for the first attempt). */
  generation: number;
  contextRevision: number;
  /** Every coalesced input, oldest first; the last one is the message replied to. */
  inputs: AgentInput[];
  /**
   * The failed turn an operator's re-run of this turn repeats (docs/operations.md "Re-run a
   * failed turn"), when it is one. In-process agents only: not part of the HTTP contract.
   */
  rerunOf?: number;
}

export interface AgentReply {
  text: string;
}

/**
 * Produces the reply for one turn. `signal` aborts at the agent's timeout (or when the
 * effect's own budget ends); an agent must stop then. Throwing fails the generation.
 */
export interface Agent {
  name: string;
  /** `onText`: with a streamed answer, the text so far after each delta (a card reply shows it). */
  reply(turn: AgentTurn, signal: AbortSignal, onText?: (textSoFar: string) => void): Promise<AgentReply>;
}

/** Longest reply text posted to Lark (its text limit is far above; a runaway agent is not). */
export const MAX_REPLY_TEXT = 8000;
