import { describe, expect, it } from 'vitest';
import { fromBase64, fromBase64Url, toBase64, toBase64Url } from '../../workers/lib/base64';

const every = Uint8Array.from({ length: 256 }, (_, i) => i);

describe('base64 helpers', () => {
  it('encode RFC 4648 vectors in both alphabets', () => {
    expect(toBase64(new TextEncoder().encode('hello'))).toBe('aGVsbG8=');
    expect(toBase64(Uint8Array.of(0xfb, 0xff))).toBe('+/8=');
    expect(toBase64Url(Uint8Array.of(0xfb, 0xff))).toBe('-_8');
  });

  it('round-trip every byte value', () => {
    expect(fromBase64(toBase64(every))).toEqual(every);
    expect(fromBase64Url(toBase64Url(every))).toEqual(every);
  });

  it('refuse characters outside their alphabet', () => {
    expect(() => fromBase64('not base64!')).toThrow();
    for (const bad of ['+/8', '-_8=', 'ab c']) expect(() => fromBase64Url(bad)).toThrow();
  });
});
