import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIND_SQL } from '../../../workers/channel/inspect';
import { scratchDatabase } from '../scratch-database';

/**
 * The conversation inspector's search (workers/channel/inspect.ts FIND_SQL) stays an index probe
 * per part as the inputs grow (docs/operations.md "Conversation inspector"): 200k inputs in 20k
 * conversations of 20 installations. Before migration 0250 and the installation scope, the chat
 * part read every conversation and the message and sender parts every input (sequential scans).
 */
const db = scratchDatabase('rl_tmp');
let pool: pg.Pool;

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
}

const nodes = (n: PlanNode): PlanNode[] => [n, ...(n.Plans ?? []).flatMap(nodes)];

async function analyze(params: unknown[]): Promise<PlanNode> {
  const r = await pool.query(`explain (analyze, buffers, format json) ${FIND_SQL}`, params);
  return (r.rows[0]['QUERY PLAN'] as { Plan: PlanNode }[])[0]!.Plan;
}

const INPUTS = 200_000;
const CONVERSATIONS = 20_000;

beforeAll(async () => {
  pool = await db.open();
  // Conversation g belongs to installation li_(g % 20), chat oc_g; input k to conversation
  // k % 20k, sent by one of 50 users of that installation.
  await pool.query(
    `insert into channel_conversations (id, installation_id, workspace_id, app_id, chat_id, last_position)
     select 'lark-conversation:li_' || (g % 20) || ':oc_' || g || ':-', 'li_' || (g % 20), 'ws', 'cli', 'oc_' || g, 10
       from generate_series(0, $1 - 1) g`,
    [CONVERSATIONS],
  );
  await pool.query(
    `insert into lark_inbound_messages
       (installation_id, event_id, message_id, chat_id, chat_type, sender_open_id, message_type, content,
        received_at_ms, session_id, position, context_revision)
     select 'li_' || (c % 20), 'ev_' || k, 'om_' || k, 'oc_' || c, 'group', 'ou_' || (k % 1000), 'text', '{}',
            0, 'lark-conversation:li_' || (c % 20) || ':oc_' || c || ':-', k / $2 + 1, 0
       from generate_series(0, $1 - 1) k, lateral (select k % $2 as c) x`,
    [INPUTS, CONVERSATIONS],
  );
  await pool.query('vacuum analyze channel_conversations');
  await pool.query('vacuum analyze lark_inbound_messages');
}, 120_000);

afterAll(async () => {
  await db.drop();
});

describe('inspector search plans (200k inputs, 20k conversations)', () => {
  // Conversation 4321 is li_1's chat oc_4321; input 24321 is in it; ou_321 wrote 200 inputs of
  // li_1 in 20 conversations (k ≡ 321 mod 1000).
  for (const [label, q, found] of [
    ['by chat id', 'oc_4321', 1],
    ['by message id', 'om_24321', 1],
    ['by sender', 'ou_321', 20],
  ] as const)
    it(`${label}: index probes only, a few pages`, async () => {
      const plan = await analyze(['li_1', q, 20]);
      const all = nodes(plan);
      const seqScans = all.filter((n) => n['Node Type'] === 'Seq Scan').map((n) => n['Relation Name']);
      expect(seqScans, label).toEqual([]);
      const indexes = new Set(all.flatMap((n) => (n['Index Name'] ? [n['Index Name']] : [])));
      for (const index of [
        'channel_conversations_installation_chat',
        'lark_inbound_messages_installation_id_message_id_key',
        'lark_inbound_messages_installation_sender',
      ])
        expect([...indexes], label).toContain(index);
      const blocks = (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);
      // The sender's newest 200 inputs, their heap rows scattered: the bound of the worst part.
      expect(blocks, label).toBeLessThan(400);
      const { rows } = await pool.query(FIND_SQL, ['li_1', q, 20]);
      expect(rows.length, label).toBe(found);
    });
});
