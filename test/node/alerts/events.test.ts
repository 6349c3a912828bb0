import { readFileSync } from 'node:fs';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ALERTS, classify, dedupeKey } from '../../../workers/alerts/events';

const doc = readFileSync(fileURLToPath(new URL('../../../docs/operations.md', import.meta.url)), 'utf8');

/** The rows of a section's table: cells split on unescaped pipes. */
function tableRows(heading: string): string[][] {
  const start = doc.indexOf(`\n## ${heading}`);
  expect(start, heading).toBeGreaterThan(-1);
  const end = doc.indexOf('\n## ', start + 4);
  return doc
    .slice(start, end === -1 ? undefined : end)
    .split('\n')
    .filter((l) => l.startsWith('| `'))
    .map((l) =>
      l
        .replace(/^\||\|$/g, '')
        .split(/(?<!\\)\|/)
        .map((c) => c.trim()),
    );
}

/** Each event named in a row's first cell with the level the second cell gives it ("warn / error" is positional). */
function documented(): Map<string, string> {
  const out = new Map<string, string>();
  for (const heading of [
    'Alerts to set (structured JSON logs, field `event`)',
    'Every caught failure has an event',
  ]) {
    for (const [first, level] of tableRows(heading)) {
      // Event names are the backticked words outside parentheses (those are its fields).
      const names = [...first!.replace(/\([^)]*\)/g, '').matchAll(/`([a-z][a-z0-9_]*)`/g)].map((m) => m[1]!);
      const levels = level!.split('/').map((l) => l.trim());
      names.forEach((name, i) => {
        const lv = levels.length === names.length ? levels[i]! : levels[0]!;
        const seen = out.get(name);
        if (seen) expect(seen, `${name} is listed twice with different levels`).toBe(lv);
        out.set(name, lv);
      });
    }
  }
  return out;
}

describe('the alert table (workers/alerts/events.ts) is the one docs/operations.md lists', () => {
  it('names every listed event at its listed level, and nothing else', () => {
    const fromDoc = documented();
    expect(fromDoc.size).toBeGreaterThan(40);
    expect(Object.fromEntries(Object.entries(ALERTS).map(([e, r]) => [e, r.level]))).toEqual(
      Object.fromEntries(fromDoc),
    );
  });

  it('drops only what the doc calls an audit trail, and says so in docs/operations.md "Alerts"', () => {
    const dropped = Object.entries(ALERTS)
      .filter(([, r]) => r.deliver === false)
      .map(([e]) => e);
    expect(dropped).toEqual(['typing_manual_removal']);
    expect(doc).toMatch(/## Alerts\n[\s\S]*`typing_manual_removal`[^\n]*not sent/);
  });

  it('keys name fields the events carry, never a per-occurrence id', () => {
    for (const [event, rule] of Object.entries(ALERTS))
      for (const k of rule.key) expect(k, event).not.toMatch(/^(rowId|requestId|effectId|heldMs|count)$/);
  });
});

describe('classify', () => {
  const line = (fields: Record<string, unknown>) => [JSON.stringify({ level: 'warn', time: 't', ...fields })];

  it("reads workers/log.ts's lines of alert-class events, with their fields", () => {
    const a = classify(
      'reaction-ledger',
      line({ event: 'typing_add_failed', outcome: 'not_added', code: 99991400 }),
    );
    expect(a).toEqual({
      worker: 'reaction-ledger',
      event: 'typing_add_failed',
      level: 'warn',
      dedupeKey: 'reaction-ledger|typing_add_failed|outcome=not_added|code=99991400',
      fields: { outcome: 'not_added', code: 99991400 },
    });
  });

  it('ignores other events, audit lines, plain text, several arguments and broken JSON', () => {
    expect(classify('w', line({ event: 'lark_webhook_received' }))).toBeNull();
    expect(classify('w', line({ event: 'typing_manual_removal', rowId: 'r' }))).toBeNull();
    expect(classify('w', ['db_unavailable happened'])).toBeNull();
    expect(classify('w', [JSON.stringify({ event: 'db_unavailable' }), 'x'])).toBeNull();
    expect(classify('w', ['{"event": "db_unavailable"'])).toBeNull();
    expect(classify('w', ['["db_unavailable"]'])).toBeNull();
    expect(classify('w', line({ event: 'toString' }))).toBeNull();
  });

  it('dedupes per Worker, event and key fields; other fields (ids, errors) do not split a burst', () => {
    const k = (worker: string, f: Record<string, unknown>) => dedupeKey(worker, 'db_unavailable', f);
    expect(k('a', { path: '/healthz', requestId: '1', error: 'x' })).toBe(
      k('a', { path: '/healthz', requestId: '2' }),
    );
    expect(k('a', { path: '/healthz' })).not.toBe(k('a', { path: '/v1/x' }));
    expect(k('a', { path: '/healthz' })).not.toBe(k('b', { path: '/healthz' }));
    // Bounded: a long value cannot make a key (stored by the gate) long.
    expect(k('a', { path: 'x'.repeat(10_000) }).length).toBeLessThan(120);
  });
});
