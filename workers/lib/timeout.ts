/**
 * Stops waiting for `work` after `ms` and rejects with `onTimeout()`. The timer is cleared
 * however `work` settles, so no stray timer outlives the call. `work` itself is not cancelled:
 * pass it a signal, or bound it on its own side (statement_timeout), when it must stop too.
 */
export async function withTimeout<T>(work: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), ms);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}
