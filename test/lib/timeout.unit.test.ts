import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { withTimeout } from '../../workers/lib/timeout';

// Fake timers: time is moved by hand, never slept; the timer count shows what is left behind.
beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

const late = () => new Error('late');

describe('withTimeout', () => {
  it('returns the result and leaves no timer behind', async () => {
    await expect(withTimeout(Promise.resolve(7), 1000, late)).resolves.toBe(7);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('passes a failure through and leaves no timer behind', async () => {
    await expect(withTimeout(Promise.reject(new Error('boom')), 1000, late)).rejects.toThrow('boom');
    expect(vi.getTimerCount()).toBe(0);
  });

  it('rejects with onTimeout() exactly when the time is up', async () => {
    let outcome = 'pending';
    const p = withTimeout(new Promise(() => {}), 1000, late).catch((e: Error) => {
      outcome = e.message;
    });
    await vi.advanceTimersByTimeAsync(999);
    expect(outcome).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    await p;
    expect(outcome).toBe('late');
    expect(vi.getTimerCount()).toBe(0);
  });
});
