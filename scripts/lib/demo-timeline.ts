// What `npm run demo` prints (scripts/demo.ts), in the order it happened. The emulator stamps
// every message it creates and every Open API call it answers with its own clock, so the lines
// come from those stamps, not from the order the demo happened to look: polling the badges
// before the replies printed "badge GONE" ahead of a reply that had come first.

/** A user message the emulator delivered to the webhook. */
export interface SentMessage {
  id: string;
  text: string;
  /** Its create_time on the emulator's clock (ms). */
  sentAt: number;
  /** The webhook's answer, as the emulator measured it. */
  status: number;
  latencyMs: number;
}

/** One entry of the emulator's call log (GET /__emulator/calls). */
export interface EmulatorCall {
  route: string;
  appId?: string;
  messageId?: string;
  status: number | 'dropped';
  at: number;
}

export type BadgeState = 'never' | 'on' | 'gone';

export interface TimelineEvent {
  at: number;
  /** Stable across renders, so a line is printed once. */
  key: string;
  line: string;
}

export interface Timeline {
  /** Oldest first; within one millisecond, in the order the emulator logged them. */
  events: TimelineEvent[];
  badges: Map<string, BadgeState>;
  replies: number;
}

/** `message id → its replies' texts`, oldest first (GET /__emulator/messages/:id/replies). */
export type ReplyTexts = ReadonlyMap<string, readonly string[]>;

/**
 * The demo's events from what the emulator recorded: the user's messages and the webhook's
 * answers, then our app's answered calls on those messages (a `Typing` badge added, withdrawn,
 * a reply posted). A call the emulator refused or dropped changed nothing and is not an event.
 */
export function demoTimeline(
  appId: string,
  messages: readonly SentMessage[],
  calls: readonly EmulatorCall[],
  replyTexts: ReplyTexts,
): Timeline {
  const byId = new Map(messages.map((m) => [m.id, m]));
  const events: TimelineEvent[] = [];
  for (const m of messages) {
    events.push({ at: m.sentAt, key: `sent ${m.id}`, line: `user says ${JSON.stringify(m.text)} (${m.id})` });
    events.push({
      at: m.sentAt + m.latencyMs,
      key: `answered ${m.id}`,
      line: `webhook answered ${JSON.stringify(m.text)}: HTTP ${m.status} in ${m.latencyMs} ms`,
    });
  }
  const badges = new Map(messages.map((m) => [m.id, 'never' as BadgeState]));
  const repliesSeen = new Map<string, number>();
  let replies = 0;
  calls.forEach((call, i) => {
    const m = call.messageId ? byId.get(call.messageId) : undefined;
    if (!m || call.appId !== appId || call.status !== 200) return;
    const quoted = JSON.stringify(m.text);
    const state = badges.get(m.id)!;
    if (call.route === 'reactions.create' && state !== 'on') {
      badges.set(m.id, 'on');
      events.push({ at: call.at, key: `call ${i}`, line: `Typing badge ON   ${quoted}` });
    } else if (call.route === 'reactions.delete' && state === 'on') {
      badges.set(m.id, 'gone');
      events.push({ at: call.at, key: `call ${i}`, line: `Typing badge GONE ${quoted}` });
    } else if (call.route === 'reply') {
      const nth = repliesSeen.get(m.id) ?? 0;
      repliesSeen.set(m.id, nth + 1);
      replies += 1;
      const text = replyTexts.get(m.id)?.[nth];
      const said = text === undefined ? '(its text is no longer in the emulator)' : JSON.stringify(text);
      events.push({ at: call.at, key: `call ${i}`, line: `bot replies to ${quoted}: ${said}` });
    }
  });
  // A stable sort: equal stamps keep the order above (a message before its answer, calls in
  // the order the emulator logged them).
  events.sort((a, b) => a.at - b.at);
  return { events, badges, replies };
}

/** The demo's last line once a reply came and no badge is left on; undefined until then. */
export function doneLine(timeline: Timeline): string | undefined {
  const states = [...timeline.badges.values()];
  if (timeline.replies === 0 || states.includes('on')) return undefined;
  const withdrawn = states.filter((s) => s === 'gone').length;
  return (
    `done: ${count(states.length, 'message')}, ${count(timeline.replies, 'reply', 'replies')}; ` +
    `${withdrawn} of ${states.length} Typing badges added and withdrawn` +
    (withdrawn < states.length ? ` (${states.length - withdrawn} never added)` : '')
  );
}

function count(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** `+  123 ms`, from the demo's start on the emulator's clock. */
export function sinceStart(at: number, startedAt: number): string {
  return `+${String(at - startedAt).padStart(5)} ms`;
}
