// What the mobile client demo (demo.ts) prints about the journal, as pure functions, so each
// line can be checked: examples a newcomer reads first must say what actually happened.
import { type JournalEntry, statusOf } from '../../clients/mobile/src';

/**
 * The part of an operation ID that tells two apart. Operation IDs are UUIDv7s: the first 48
 * bits are the millisecond they were stamped, so their leading digits are the same for every
 * choice of one run (`op 01a23533` four times); the tail (random bits) names each one.
 */
export function opLabel(operationId: string): string {
  return `…${operationId.replaceAll('-', '').slice(-8)}`;
}

/** One journal entry: the choice, its operation, where it stands, and how it ended. */
export function entryLine(e: JournalEntry): string {
  return (
    `${e.intent.emoji} ${e.intent.desired.padEnd(7)} op ${opLabel(e.operationId)} ${statusOf(e)}` +
    (e.lastError && !e.terminal ? ` (last: ${e.lastError})` : '') +
    (e.terminal ? ` → ${e.terminal.outcome} (reaction ${e.terminal.reflected})` : '')
  );
}

/** What the demo found in the device's journal when it signed in. */
export function journalLine(entries: number, path: string): string {
  if (entries === 0) return `started a new journal (${path})`;
  return `resumed the journal of an earlier run (${entries} ${entries === 1 ? 'entry' : 'entries'}) at ${path}`;
}
