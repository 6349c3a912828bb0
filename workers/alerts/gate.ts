/**
 * Which alert lines become notifications: dedupe per key within a window, then a rate limit
 * over all keys. Pure: the AlertGate Durable Object keeps this state in its storage (one
 * instance for the account, so every isolate and location shares it), and the Tail Worker falls
 * back to an in-isolate copy when the object cannot be reached.
 *
 * - Dedupe: the first line of a key opens its window and is delivered; the others in the window
 *   are only counted, and the next notification of that key (in a later window) says how many.
 * - Rate limit: at most `ratePerMinute` notifications a minute over all keys. A line held back
 *   opens no window (its next occurrence tries again), and the next delivered notification
 *   says how many were held back.
 */
export interface GateConfig {
  windowMs: number;
  ratePerMinute: number;
}

export interface GateState {
  keys: Record<string, { since: number; count: number }>;
  rate: { since: number; sent: number; heldBack: number };
}

export interface Admitted {
  dedupeKey: string;
  /** Lines of this key the previous window held after its notification. */
  repeatsBefore: number;
  /** Notifications the rate limit held back since the last delivered one. */
  heldBack: number;
}

/** Bounded state: beyond this many keys the oldest windows are forgotten first. */
export const MAX_KEYS = 1000;
const MINUTE_MS = 60_000;

export const emptyGate = (): GateState => ({ keys: {}, rate: { since: 0, sent: 0, heldBack: 0 } });

/** Admits `keys` (one per line, in order) at `now`; mutates `state`. */
export function admit(
  state: GateState,
  keys: readonly string[],
  now: number,
  config: GateConfig,
): Admitted[] {
  const out: Admitted[] = [];
  for (const key of keys) {
    const open = state.keys[key];
    if (open && now - open.since < config.windowMs) {
      open.count++;
      continue;
    }
    if (now - state.rate.since >= MINUTE_MS)
      state.rate = { since: now, sent: 0, heldBack: state.rate.heldBack };
    if (state.rate.sent >= config.ratePerMinute) {
      state.rate.heldBack++;
      continue;
    }
    state.rate.sent++;
    out.push({ dedupeKey: key, repeatsBefore: open ? open.count - 1 : 0, heldBack: state.rate.heldBack });
    state.rate.heldBack = 0;
    state.keys[key] = { since: now, count: 1 };
  }
  prune(state, now, config.windowMs);
  return out;
}

/** Forgets windows that closed long ago (their repeat count no longer says much) and the overflow. */
function prune(state: GateState, now: number, windowMs: number) {
  let entries = Object.entries(state.keys);
  for (const [key, w] of entries) if (now - w.since >= 2 * windowMs) delete state.keys[key];
  entries = Object.entries(state.keys);
  if (entries.length <= MAX_KEYS) return;
  entries.sort((a, b) => a[1].since - b[1].since);
  for (const [key] of entries.slice(0, entries.length - MAX_KEYS)) delete state.keys[key];
}
