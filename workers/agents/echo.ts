import type { Agent } from './types';

/** The built-in agent: echoes the turn's inputs, so the engine works with no agent service. */
export const echoAgent: Agent = {
  name: 'echo',
  async reply(turn) {
    const texts = turn.inputs.map((i) => i.text);
    return {
      text: texts.length === 1 ? `echo: ${texts[0]}` : `echo (${texts.length}): ${texts.join(' | ')}`,
    };
  },
};
