import { describe, expect, it } from 'vitest';
import { constantTimeEqual } from '../../workers/lib/constant-time';

describe('constantTimeEqual', () => {
  it('is true only for identical inputs', () => {
    expect(constantTimeEqual('', '')).toBe(true);
    expect(constantTimeEqual('s3cret-token', 's3cret-token')).toBe(true);
    expect(constantTimeEqual('s3cret-token', 's3cret-tokeN')).toBe(false);
    expect(constantTimeEqual('X3cret-token', 's3cret-token')).toBe(false);
  });

  it('never matches a prefix or extension (lengths differ)', () => {
    expect(constantTimeEqual('token', 'token\0')).toBe(false);
    expect(constantTimeEqual('', 'a')).toBe(false);
    expect(constantTimeEqual('abc', 'ab')).toBe(false);
  });

  it('compares strings as UTF-8 bytes, so bytes and strings mix', () => {
    expect(constantTimeEqual('é', Uint8Array.of(0xc3, 0xa9))).toBe(true);
    expect(constantTimeEqual(Uint8Array.of(1, 2), Uint8Array.of(1, 3))).toBe(false);
  });
});
