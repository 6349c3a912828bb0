import { describe, expect, it } from 'vitest';
import {
  demoTimeline,
  doneLine,
  type EmulatorCall,
  type SentMessage,
  sinceStart,
} from '../../../scripts/lib/demo-timeline';

/**
 * `npm run demo`'s lines (scripts/lib/demo-timeline.ts): in the order the emulator stamped
 * them, whatever order the demo looked in. A run as the emulator recorded it: three messages,
 * each badged as its webhook answered, one reply to the newest, then the three badges withdrawn.
 */
const APP = 'cli_demo';
const messages: SentMessage[] = [
  { id: 'om_1', text: 'hello', sentAt: 1_000, status: 200, latencyMs: 43 },
  { id: 'om_2', text: 'are you there?', sentAt: 1_067, status: 200, latencyMs: 42 },
  { id: 'om_3', text: 'one turn', sentAt: 1_116, status: 200, latencyMs: 48 },
];
const call = (
  route: string,
  messageId: string | undefined,
  at: number,
  extra: Partial<EmulatorCall> = {},
) => ({
  route,
  appId: APP,
  messageId,
  status: 200,
  at,
  ...extra,
});
const calls: EmulatorCall[] = [
  call('token', undefined, 1_040),
  call('reactions.create', 'om_1', 1_045),
  call('reactions.create', 'om_2', 1_108),
  // Another app's badge, a refused call, a repeated Add of a badge already on: not events.
  call('reactions.create', 'om_3', 1_150, { appId: 'cli_other' }),
  call('reactions.create', 'om_3', 1_160),
  call('reactions.create', 'om_3', 1_161),
  call('reactions.list', 'om_3', 1_170),
  call('reply', 'om_3', 2_731),
  call('reactions.delete', 'om_1', 2_776),
  call('reactions.delete', 'om_1', 2_777, { status: 400 }),
  call('reactions.delete', 'om_2', 2_779),
  call('reactions.delete', 'om_3', 2_782),
];
const replies = new Map([['om_3', ['echo (3): hello | are you there? | one turn']]]);

describe('the demo timeline', () => {
  it('demo.lines_in_the_order_they_happened: messages, answers, badges and the reply interleave by their stamps; the reply comes before the badges it ends', () => {
    const { events } = demoTimeline(APP, messages, calls, replies);
    expect(events.map((e) => `${sinceStart(e.at, 1_000)} ${e.line}`)).toEqual([
      '+    0 ms user says "hello" (om_1)',
      '+   43 ms webhook answered "hello": HTTP 200 in 43 ms',
      '+   45 ms Typing badge ON   "hello"',
      '+   67 ms user says "are you there?" (om_2)',
      '+  108 ms Typing badge ON   "are you there?"',
      '+  109 ms webhook answered "are you there?": HTTP 200 in 42 ms',
      '+  116 ms user says "one turn" (om_3)',
      '+  160 ms Typing badge ON   "one turn"',
      '+  164 ms webhook answered "one turn": HTTP 200 in 48 ms',
      '+ 1731 ms bot replies to "one turn": "echo (3): hello | are you there? | one turn"',
      '+ 1776 ms Typing badge GONE "hello"',
      '+ 1779 ms Typing badge GONE "are you there?"',
      '+ 1782 ms Typing badge GONE "one turn"',
    ]);
  });

  it('demo.renders_only_append: what a later render adds comes after every line an earlier render printed', () => {
    const full = demoTimeline(APP, messages, calls, replies).events.map((e) => e.key);
    // The demo renders right after each webhook answer reaches it, then once per poll: it knows
    // the messages answered by then and the calls the emulator had logged.
    const answered = messages.map((m) => m.sentAt + m.latencyMs);
    const lastAnswer = answered.at(-1)!;
    const renders = [...answered, ...calls.map((c) => c.at).filter((at) => at > lastAnswer)];
    for (const t of renders) {
      const known = messages.filter((m) => m.sentAt + m.latencyMs <= t);
      const logged = calls.filter((c) => c.at <= t);
      const earlier = demoTimeline(APP, known, logged, replies).events.map((e) => e.key);
      expect(full.slice(0, earlier.length), `render at ${t}`).toEqual(earlier);
    }
  });

  it('demo.done_line: only once a reply came and no badge is on, saying what happened', () => {
    expect(doneLine(demoTimeline(APP, messages, calls.slice(0, 8), replies))).toBeUndefined();
    expect(doneLine(demoTimeline(APP, messages, calls.slice(0, 10), replies))).toBeUndefined();
    expect(doneLine(demoTimeline(APP, messages, calls, replies))).toBe(
      'done: 3 messages, 1 reply; 3 of 3 Typing badges added and withdrawn',
    );
    const unbadged = calls.filter((c) => c.messageId !== 'om_2');
    expect(doneLine(demoTimeline(APP, messages, unbadged, replies))).toBe(
      'done: 3 messages, 1 reply; 2 of 3 Typing badges added and withdrawn (1 never added)',
    );
  });
});
