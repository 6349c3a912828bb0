/**
 * A Lark emulator of the file's own on a manual clock, one app with a tenant token, and the
 * CardKit calls as a client makes them over HTTP. `reset()` gives each test a new emulator
 * world on the same port (POST /__emulator/reset), so no card or setting leaks between tests.
 */
import { type LarkEmulator, startLarkEmulator } from '../../../emulator/server';

export interface Answer {
  status: number;
  headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: Lark answers are read field by field in the tests
  body: any;
}

export const APP = { app_id: 'cli_cardkit', app_secret: 'secret-cardkit', verification_token: 'vt-cardkit' };
export const OTHER_APP = { app_id: 'cli_other', app_secret: 'secret-other', verification_token: 'vt-other' };

/** A streaming card with one markdown element, `answer`. */
export const streamingCard = (text = '', config: Record<string, unknown> = {}) => ({
  schema: '2.0',
  config: { streaming_mode: true, summary: { content: '[generating]' }, ...config },
  body: { elements: [{ tag: 'markdown', element_id: 'answer', content: text }] },
});

export const cardBody = (card: unknown) => ({ type: 'card_json', data: JSON.stringify(card) });

export class Harness {
  now = 1_800_000_000_000;
  token = '';
  otherToken = '';

  private constructor(readonly emu: LarkEmulator) {}

  static async start(): Promise<Harness> {
    let h: Harness | undefined;
    const emu = await startLarkEmulator({ clock: { now: () => h!.now } });
    h = new Harness(emu);
    return h;
  }

  get base(): string {
    return this.emu.url;
  }

  async reset(): Promise<void> {
    await this.control('reset', {});
    await this.control('apps', APP);
    await this.control('apps', OTHER_APP);
    await this.renewTokens();
  }

  /** New tenant tokens (after the clock moved past their 2 h). */
  async renewTokens(): Promise<void> {
    this.token = await this.tokenFor(APP);
    this.otherToken = await this.tokenFor(OTHER_APP);
  }

  advance(ms: number): void {
    this.now += ms;
  }

  private async tokenFor(app: typeof APP): Promise<string> {
    const a = await this.api('POST', '/open-apis/auth/v3/tenant_access_token/internal', app, null);
    return a.body.tenant_access_token;
  }

  // biome-ignore lint/suspicious/noExplicitAny: control answers are loose JSON
  async control(path: string, body?: unknown, method?: string): Promise<any> {
    const res = await fetch(`${this.base}/__emulator/${path}`, {
      method: method ?? (body === undefined ? 'GET' : 'POST'),
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return res.json();
  }

  /** An Open API call; `token: null` sends none. */
  async api(
    method: string,
    path: string,
    body?: unknown,
    token: string | null = this.token,
  ): Promise<Answer> {
    const res = await fetch(`${this.base}${path}`, {
      method,
      headers: {
        'content-type': 'application/json',
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // A 5xx fault answers plain text: kept as it is.
    }
    return { status: res.status, headers: res.headers, body: parsed };
  }

  async createCard(card: unknown = streamingCard(), token = this.token): Promise<string> {
    const a = await this.api('POST', '/open-apis/cardkit/v1/cards', cardBody(card), token);
    if (a.body?.code !== 0) throw new Error(`create failed: ${JSON.stringify(a.body)}`);
    return a.body.data.card_id;
  }

  /** A user's message in the emulator's world, for a card to answer. */
  async userMessage(text = 'question?'): Promise<string> {
    return (await this.control('messages', { text })).message_id;
  }

  sendCard(parentId: string, cardId: string, uuid?: string): Promise<Answer> {
    return this.api('POST', `/open-apis/im/v1/messages/${parentId}/reply`, {
      msg_type: 'interactive',
      content: JSON.stringify({ type: 'card', data: { card_id: cardId } }),
      ...(uuid ? { uuid } : {}),
    });
  }

  content(cardId: string, sequence: unknown, content: string, uuid?: string, element = 'answer') {
    return this.api('PUT', `/open-apis/cardkit/v1/cards/${cardId}/elements/${element}/content`, {
      content,
      sequence,
      ...(uuid ? { uuid } : {}),
    });
  }

  settings(cardId: string, sequence: number, config: Record<string, unknown>) {
    return this.api('PATCH', `/open-apis/cardkit/v1/cards/${cardId}/settings`, {
      settings: JSON.stringify({ config }),
      sequence,
    });
  }

  fullUpdate(cardId: string, sequence: number, card: unknown) {
    return this.api('PUT', `/open-apis/cardkit/v1/cards/${cardId}`, { card: cardBody(card), sequence });
  }

  batchUpdate(cardId: string, sequence: number, actions: unknown[], uuid?: string) {
    return this.api('POST', `/open-apis/cardkit/v1/cards/${cardId}/batch_update`, {
      actions: JSON.stringify(actions),
      sequence,
      ...(uuid ? { uuid } : {}),
    });
  }
}
