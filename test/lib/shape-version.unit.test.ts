import { describe, expect, it } from 'vitest';
import { isNewerShape, shapeVersionOf, withShapeVersion } from '../../workers/lib/shape-version';

describe('shape versions (workers/lib/shape-version.ts)', () => {
  it('version 1 is the first release’s bytes: nothing is added, and anything without `_v` reads as 1', () => {
    const v1 = { text: 'hi' };
    expect(withShapeVersion(v1, 1)).toBe(v1);
    for (const value of [v1, null, 'text', 3, [1, 2], { _v: 'x' }, { _v: 0 }, { _v: 1.5 }])
      expect(shapeVersionOf(value)).toBe(1);
  });

  it('a bump writes `_v` and needs an object to carry it', () => {
    expect(withShapeVersion({ text: 'hi' }, 2)).toEqual({ text: 'hi', _v: 2 });
    expect(shapeVersionOf({ text: 'hi', _v: 2 })).toBe(2);
    expect(() => withShapeVersion('text', 2)).toThrow(/must be a JSON object/);
    expect(() => withShapeVersion([1], 2)).toThrow(/must be a JSON object/);
  });

  it('a reader accepts its own version and older ones, and refuses a newer one', () => {
    const quiet = { shape: 'test', where: {} };
    expect(isNewerShape(quiet.shape, { _v: 2 }, 2, quiet.where)).toBe(false);
    expect(isNewerShape(quiet.shape, {}, 2, quiet.where)).toBe(false);
    expect(isNewerShape(quiet.shape, { _v: 3 }, 2, quiet.where)).toBe(true);
  });
});
