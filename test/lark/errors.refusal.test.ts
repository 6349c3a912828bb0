import { afterEach, describe, expect, it } from 'vitest';
import { Deadline } from '../../workers/clock';
import { LarkClient } from '../../workers/lark/client';
import { LarkApiError, provesNothingApplied } from '../../workers/lark/errors';
import { emu, installApp, larkBase, larkFailure } from './helpers';

/**
 * The one decision "does this failed call prove Lark applied nothing?" (workers/lark/errors.ts).
 * Real answers from the emulator where it can give them; the answers it cannot produce
 * (231015, a Lark-JSON 5xx, an unreadable 2xx) are built as the client would build them.
 */
const call = () => ({ deadline: new Deadline(5000) });

afterEach(async () => {
  await emu('faults', undefined, 'DELETE');
});

describe('provesNothingApplied', () => {
  it('a refusal proves nothing was applied: 429/99991400, a 4xx business refusal, a token refused after the refresh, an unknown path', async () => {
    const app = await installApp();
    const lark = new LarkClient({ baseUrl: larkBase(), appId: app.appId, appSecret: app.appSecret });
    const { message_id: messageId } = await emu<{ message_id: string }>('messages', { text: 'hi' });
    await emu('faults', { route: 'reactions.create', kind: '429', resetSeconds: 3 });
    const limited = await larkFailure(lark.createReaction(messageId, 'Typing', call()));
    const refused = await larkFailure(lark.createReaction(messageId, 'PROCESSING', call()));
    await emu('faults', { route: 'reactions.create', kind: 'expired_token', times: 2 });
    const token = await larkFailure(lark.createReaction(messageId, 'Typing', call()));
    const nowhere = new LarkClient({ baseUrl: `${larkBase()}/nowhere`, appId: app.appId, appSecret: 'x' });
    const unknownPath = await larkFailure(nowhere.createReaction(messageId, 'Typing', call()));
    expect(
      [limited, refused, token, unknownPath].map((e) => [e.code, e.httpStatus, provesNothingApplied(e)]),
    ).toEqual([
      [99991400, 429, true],
      [231001, 400, true],
      [99991663, 400, true],
      [0, 404, true],
    ]);
    // Some older APIs answer the rate limit with HTTP 400 (reference §2).
    expect(provesNothingApplied(new LarkApiError('retryable', 99991400, 400, 'limited'))).toBe(true);
    // Nothing reached the emulator's reactions: none of these applied anything.
    expect((await emu<{ items: unknown[] }>(`messages/${messageId}/reactions`)).items).toEqual([]);
  });

  it('an ambiguous failure proves nothing: 5xx, lost response, timeout, 231015 in flight elsewhere, an unreadable success', async () => {
    const app = await installApp();
    const lark = new LarkClient({ baseUrl: larkBase(), appId: app.appId, appSecret: app.appSecret });
    const { message_id: messageId } = await emu<{ message_id: string }>('messages', { text: 'hi' });
    await emu('faults', { route: 'reactions.create', kind: '5xx', status: 502 });
    const down = await larkFailure(lark.createReaction(messageId, 'Typing', call()));
    await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
    const lost = await larkFailure(lark.createReaction(messageId, 'Typing', call()));
    await emu('faults', { route: 'reactions.create', kind: 'hold' });
    const timedOut = await larkFailure(
      lark.createReaction(messageId, 'Typing', { deadline: new Deadline(200) }),
    );
    const built = [
      new LarkApiError('retryable', 231015, 400, 'repeated request processing'),
      new LarkApiError('retryable', 1000004, 500, 'internal error, Lark JSON'),
      new LarkApiError('permanent', 0, 200, 'POST /reactions answered an unexpected shape'),
    ];
    expect([down, lost, timedOut, ...built].map(provesNothingApplied)).toEqual([
      false,
      false,
      false,
      false,
      false,
      false,
    ]);
  });

  it('refusal.gateway_4xx_uncertain: a 4xx without Lark JSON (a gateway 408/499, an HTML 400) proves nothing; only the plain-text 404 does', async () => {
    const app = await installApp();
    const lark = new LarkClient({ baseUrl: larkBase(), appId: app.appId, appSecret: app.appSecret });
    const { message_id: messageId } = await emu<{ message_id: string }>('messages', { text: 'hi' });
    const answers: LarkApiError[] = [];
    for (const status of [408, 499, 400]) {
      // The emulator's gateway fault: HTTP `status`, a body that is not Lark JSON.
      await emu('faults', { route: 'reactions.create', kind: '5xx', status });
      answers.push(await larkFailure(lark.createReaction(messageId, 'Typing', call())));
    }
    expect(answers.map((e) => [e.code, e.httpStatus, provesNothingApplied(e)])).toEqual([
      [0, 408, false],
      [0, 499, false],
      [0, 400, false],
    ]);
  });
});
