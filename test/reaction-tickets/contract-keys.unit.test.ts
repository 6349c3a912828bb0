import { readFileSync } from 'node:fs';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { CONTRACT_ANSWERS } from '../../workers/reaction-tickets/contract-answers';

/**
 * The reaction contract's SQL (migrations/functions/reaction_tickets.sql) raises keys that
 * contract-answers.ts turns into API answers; a key raised but not mapped would be a 500, a key
 * mapped but never raised is a stale answer. The keys are the literals passed to
 * private.reaction_ticket_fail and the refusals private.reaction_admission returns.
 */
const sql = readFileSync(
  fileURLToPath(new URL('../../migrations/functions/reaction_tickets.sql', import.meta.url)),
  'utf8',
);

function raisedKeys(text: string): Set<string> {
  const keys = new Set<string>();
  for (const m of text.matchAll(/reaction_ticket_fail\('([\w/]+)'/g)) keys.add(m[1]!);
  const admission = text.slice(
    text.indexOf('function private.reaction_admission('),
    text.indexOf('$$;', text.indexOf('function private.reaction_admission(')),
  );
  for (const m of admission.matchAll(/then '([\w/]+)'/g)) keys.add(m[1]!);
  return keys;
}

describe('the contract error keys: SQL and TypeScript name the same set', () => {
  it('every key the SQL raises has an answer, and every answer is raised', () => {
    const raised = raisedKeys(sql);
    expect(raised.size).toBeGreaterThanOrEqual(8);
    expect([...raised].sort()).toEqual(Object.keys(CONTRACT_ANSWERS).sort());
  });

  it('a key the SQL raises without an answer is found (the check can fail)', () => {
    const edited = sql.replace(
      "reaction_ticket_fail('ticket_invalid'",
      "reaction_ticket_fail('ticket_unknown'",
    );
    expect([...raisedKeys(edited)].sort()).not.toEqual(Object.keys(CONTRACT_ANSWERS).sort());
  });
});
