import { vi } from 'vitest';

/** One structured line of workers/log.ts, parsed. `error` is `{ name, message }` (the class). */
export interface LogLine {
  level: string;
  event: string;
  error?: { name: string; message: string };
  [field: string]: unknown;
}

/**
 * Captures the structured log lines written from now on (they are still printed), in this
 * isolate: the test's own calls, the Worker's handlers and the Durable Objects alike.
 * `restore()` ends the capture.
 */
export function captureLogLines() {
  const lines: LogLine[] = [];
  const spies = (['log', 'warn', 'error'] as const).map((m) => {
    const orig = console[m].bind(console);
    return vi.spyOn(console, m).mockImplementation((...args: unknown[]) => {
      try {
        const parsed = JSON.parse(String(args[0])) as LogLine;
        if (parsed && typeof parsed.event === 'string') lines.push(parsed);
      } catch {
        // Not one of ours (a library's plain text line): printed, not captured.
      }
      orig(...(args as []));
    });
  });
  return {
    lines,
    events: (event: string) => lines.filter((l) => l.event === event),
    restore: () => {
      for (const s of spies) s.mockRestore();
    },
  };
}
