/**
 * `npx tsx scripts/agent-schema.ts`: writes docs/agent-protocol.schema.json from the agent
 * contract's schemas (workers/agents/contract.ts). test/node/agents/contract.test.ts fails
 * when the committed file and the code drift.
 */
import { writeFile } from 'node:fs/promises';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { agentContractSchema } from '../workers/agents/contract';

export const AGENT_SCHEMA_FILE = fileURLToPath(
  new URL('../docs/agent-protocol.schema.json', import.meta.url),
);

export const agentSchemaText = () => `${JSON.stringify(agentContractSchema(), null, 2)}\n`;

if (import.meta.url === `file://${process.argv[1]}`) {
  await writeFile(AGENT_SCHEMA_FILE, agentSchemaText());
  console.log(`wrote ${AGENT_SCHEMA_FILE}`);
}
