import { inject } from 'vitest';

/** The run's seed (printed by the global setup; `TEST_SEED=<n> npm test` replays it). */
export function testSeed(): number {
  return inject('testSeed');
}

/**
 * A small deterministic generator (LCG). Concurrent workers each take their own, derived
 * from the run's seed and the worker's index, so a worker's sequence of operations does not
 * depend on how the workers interleave.
 */
export function generator(seed: number, stream = 0): () => number {
  // Mixes the stream index in with a large odd constant so neighbouring streams diverge.
  let s = (seed ^ Math.imul(stream + 1, 0x9e3779b1)) >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}
