/**
 * Crons do not fire in `wrangler dev`; this ticker calls the `--test-scheduled` endpoint on
 * the real schedule: "* * * * *" at the top of every minute, "0 * * * *" at minute 0.
 */
export function startCronTicker(baseUrl: string, log: (line: string) => void): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const fire = async (cron: string) => {
    const url = `${baseUrl}/__scheduled?cron=${encodeURIComponent(cron).replaceAll('%20', '+')}`;
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(30_000) });
      if (!res.ok) log(`cron ${cron}: HTTP ${res.status}`);
    } catch (err) {
      log(`cron ${cron}: ${(err as Error).message}`);
    }
  };
  const schedule = () => {
    const now = Date.now();
    const next = Math.ceil((now + 1) / 60_000) * 60_000;
    timer = setTimeout(() => {
      void fire('* * * * *');
      if (new Date(next).getUTCMinutes() === 0) void fire('0 * * * *');
      schedule();
    }, next - now);
  };
  schedule();
  return () => clearTimeout(timer);
}
