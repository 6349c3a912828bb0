import { describe, expect, it } from 'vitest';
import type { JournalEntry } from '../../clients/mobile/src';
import { entryLine, journalLine, opLabel } from '../../examples/mobile-client/lines';
import { mintOperationId } from '../../workers/reaction-tickets/operation-id';

/**
 * The mobile client demo's lines about the journal (examples/mobile-client/lines.ts): each one
 * true, and telling the reader something.
 */
describe('the mobile demo lines', () => {
  it('demo.op_labels_differ: four operations stamped in the same millisecond get four labels', () => {
    const at = Date.UTC(2026, 11, 2, 5, 23, 54);
    const ids = [1, 2, 3, 4].map(() => mintOperationId(at));
    const labels = ids.map(opLabel);
    expect(new Set(labels).size).toBe(4);
    // The random tail, not the timestamp every operation of a run shares.
    for (const [i, id] of ids.entries()) {
      expect(labels[i]).toMatch(/^…[0-9a-f]{8}$/);
      expect(id.replaceAll('-', '').endsWith(labels[i]!.slice(1))).toBe(true);
    }
  });

  it('demo.entry_line: the choice, its operation label, its status and how it ended', () => {
    const entry = {
      operationId: '019ad4c2-1f30-7a4b-9c1d-2e3f4a5b6c7d',
      intent: { messageId: 'demo-message-1', emoji: '👍', desired: 'present' },
      terminal: { outcome: 'applied', reflected: 'present' },
      lastError: null,
    } as unknown as JournalEntry;
    expect(entryLine(entry)).toBe('👍 present op …4a5b6c7d done → applied (reaction present)');
  });

  it('demo.journal_line: an empty journal is a new one; a journal with entries says how many it resumes', () => {
    expect(journalLine(0, '.local/mobile-demo-journal.json')).toBe(
      'started a new journal (.local/mobile-demo-journal.json)',
    );
    expect(journalLine(1, '.local/j.json')).toBe(
      'resumed the journal of an earlier run (1 entry) at .local/j.json',
    );
    expect(journalLine(3, '.local/j.json')).toBe(
      'resumed the journal of an earlier run (3 entries) at .local/j.json',
    );
  });
});
