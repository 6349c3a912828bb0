import type { Agent, AgentTurn } from './types';

function echoText(turn: AgentTurn): string {
  const texts = turn.inputs.map((i) => i.text);
  return texts.length === 1 ? `echo: ${texts[0]}` : `echo (${texts.length}): ${texts.join(' | ')}`;
}

/**
 * The echo agent failing on demand (`ECHO_AGENT_FAIL_MARKER`, `npm run dev` sets `/fail`): a
 * turn with an input whose text contains the marker fails every generation, so a turn ends
 * `failed` with no agent service (the browser suite's re-run, a failure notice to look at). A
 * re-run of it (`rerunOf`) answers: the dev stand-in for "the agent was fixed, then re-run".
 */
export function failingOnDemand(agent: Agent, marker: string): Agent {
  return {
    name: agent.name,
    reply(turn, signal, onText) {
      if (turn.rerunOf === undefined && turn.inputs.some((i) => i.text.includes(marker)))
        return Promise.reject(new Error(`echo agent: failing on demand (${marker})`));
      return agent.reply(turn, signal, onText);
    },
  };
}

/** The built-in agent: echoes the turn's inputs, so the engine works with no agent service. */
export const echoAgent: Agent = {
  name: 'echo',
  async reply(turn) {
    return { text: echoText(turn) };
  },
};

/**
 * The echo agent typing its answer out (`ECHO_AGENT_WORD_MS`, set by `npm run dev` so a
 * `card_stream` installation shows a streamed reply without an agent service): when someone
 * watches the stream (`onText`, a card reply) it reports the text so far one word at a time,
 * `wordMs` apart, as a streaming model would; a text reply (no `onText`) waits for nothing and
 * gets the same answer at once. It stops when `signal` aborts.
 */
export function typingEchoAgent(wordMs: number): Agent {
  return {
    name: 'echo',
    async reply(turn, signal, onText) {
      const text = echoText(turn);
      if (!onText) return { text };
      let soFar = '';
      for (const word of text.split(/(?<= )/)) {
        if (soFar) await pause(wordMs, signal);
        soFar += word;
        onText(soFar);
      }
      return { text };
    },
  };
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', stop);
      resolve();
    }, ms);
    const stop = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', stop, { once: true });
  });
}
