import { vi } from 'vitest';

/** One structured line of workers/log.ts, parsed. `error` is `{ name, message }` (the class). */
export interface LogLine {
  level: string;
  event: string;
  error?: { name: string; message: string };
  [field: string]: unknown;
}

/**
 * Captures the structured log lines written from now on (still printed unless `quiet`), in this
 * isolate: the test's own calls, the Worker's handlers and the Durable Objects alike.
 * `restore()` ends the capture.
 */
export function captureLogLines(opts: { quiet?: boolean } = {}) {
  const lines: LogLine[] = [];
  /** Every console call as printed text, ours or a library's (for secret searches). */
  const raw: string[] = [];
  const spies = (['log', 'warn', 'error', 'info', 'debug'] as const).map((m) => {
    const orig = console[m].bind(console);
    return vi.spyOn(console, m).mockImplementation((...args: unknown[]) => {
      raw.push(args.map(String).join(' '));
      try {
        const parsed = JSON.parse(String(args[0])) as LogLine;
        if (parsed && typeof parsed.event === 'string') lines.push(parsed);
      } catch {
        // Not one of ours (a library's plain text line): printed, not captured.
      }
      if (!opts.quiet) orig(...(args as []));
    });
  });
  return {
    lines,
    raw,
    /** Forgets what was captured so far (a long run checks and drops it as it goes). */
    clear: () => {
      lines.length = 0;
      raw.length = 0;
    },
    events: (event: string) => lines.filter((l) => l.event === event),
    restore: () => {
      for (const s of spies) s.mockRestore();
    },
  };
}
