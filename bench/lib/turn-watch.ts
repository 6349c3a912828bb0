import type pg from 'pg';
import type { LarkEmulator } from '../../emulator/server';

/**
 * What the crash and deploy benches (52, 54) watch in one trial: the typing badge on (the
 * debounce runs, the turn has not started), the turn settled, and how many replies the user
 * sees. `mark` is the emulator's call count when the trial's message was sent.
 */
export async function untilBadgeAdded(lark: LarkEmulator, mark: number): Promise<void> {
  while (!lark.calls.slice(mark).some((c) => c.route === 'reactions.create' && c.status === 200))
    await new Promise((r) => setTimeout(r, 5));
}

/** Polls until the chat's turn has an outcome; throws past `limitMs` from `since` (performance.now()). */
export async function untilTurnSettled(
  db: pg.Pool,
  chat: string,
  opts: { since: number; limitMs: number; stepMs: number; what: string },
): Promise<void> {
  for (;;) {
    const { rows } = await db.query<{ outcome: string | null }>(
      `select t.outcome from channel_turns t join channel_conversations c on c.id = t.session_id
        where c.chat_id = $1`,
      [`oc_${chat}`],
    );
    if (rows[0]?.outcome) return;
    if (performance.now() - opts.since > opts.limitMs)
      throw new Error(`${opts.what}: no reply within ${opts.limitMs / 1000} s`);
    await new Promise((r) => setTimeout(r, opts.stepMs));
  }
}

/** The replies visible on the anchors the trial's reply calls answered (one, when all went well). */
export function visibleReplies(lark: LarkEmulator, mark: number): number {
  const anchors = new Set(
    lark.calls
      .slice(mark)
      .filter((c) => c.route === 'reply' && c.status === 200)
      .map((c) => c.messageId!),
  );
  return [...anchors].reduce((n, a) => n + lark.state.repliesTo(a).length, 0);
}
