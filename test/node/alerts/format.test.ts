import { describe, expect, it } from 'vitest';
import { alertsConfig } from '../../../workers/alerts/config';
import { classify } from '../../../workers/alerts/events';
import { describeFields, notificationText, payload } from '../../../workers/alerts/format';
import { registerSecret } from '../../../workers/log';

const first = { dedupeKey: 'k', repeatsBefore: 0, heldBack: 0 };

describe('notifications', () => {
  it('say the level, event, Worker, the fields, and where to read what to do', () => {
    const line = classify('reaction-ledger', [
      JSON.stringify({
        level: 'warn',
        event: 'db_unavailable',
        path: '/healthz',
        error: { name: 'DatabaseError', message: 'too many clients', code: '53300' },
      }),
    ])!;
    const text = notificationText(line, { ...first, repeatsBefore: 41, heldBack: 2 }, 10);
    expect(text).toContain('[warn] db_unavailable on reaction-ledger');
    expect(text).toContain('path=/healthz, error=DatabaseError: too many clients (53300)');
    expect(text).toContain('41 more of these in the previous 10 min window; 2 other alert(s) held back');
    expect(text).toContain('docs/operations.md');
  });

  it('never carry a secret: by field name, by registered value, in URLs and bearer headers', () => {
    const hook = 'https://hooks.slack.example/services/T000/B000/abcdefghijklmnop';
    registerSecret(hook);
    const text = describeFields({
      app_secret: 'plain-secret-value-123',
      nested: { tenant_access_token: 't-abcdefgh12345678' },
      error: { name: 'Error', message: `POST ${hook} failed; postgres://ledger:hunter22pass@db.example/x` },
      note: 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig',
    });
    expect(text).not.toContain('plain-secret-value-123');
    expect(text).not.toContain('t-abcdefgh12345678');
    expect(text).not.toContain(hook);
    expect(text).not.toContain('hunter22pass');
    expect(text).not.toContain('eyJhbGciOiJIUzI1NiJ9');
    expect(text).toContain('[redacted]');
  });

  it('are bounded', () => {
    const line = classify('w', [JSON.stringify({ event: 'health_db_down', error: 'x'.repeat(50_000) })])!;
    expect(notificationText(line, first, 10).length).toBeLessThan(1600);
  });

  it('are Slack or Lark JSON', () => {
    expect(payload('slack', 'hi')).toEqual({ text: 'hi' });
    expect(payload('lark', 'hi')).toEqual({ msg_type: 'text', content: { text: 'hi' } });
  });
});

describe('alertsConfig', () => {
  it('reads the vars, and falls back to the defaults on nonsense', () => {
    const c = alertsConfig({
      ALERT_GATE: undefined as never,
      ALERT_WEBHOOK_URL: ' https://example.invalid/hook ',
      ALERT_WEBHOOK_FORMAT: 'LARK',
      ALERT_DEDUPE_WINDOW_S: '60',
      ALERT_RATE_PER_MINUTE: 'many',
    });
    expect(c).toEqual({
      url: 'https://example.invalid/hook',
      format: 'lark',
      windowMs: 60_000,
      ratePerMinute: 10,
      timeoutMs: 3000,
    });
    expect(alertsConfig({ ALERT_GATE: undefined as never, ALERT_WEBHOOK_URL: 'not a url' }).url).toBeNull();
    expect(alertsConfig({ ALERT_GATE: undefined as never }).format).toBe('slack');
  });
});
