/** A Worker that `wrangler dev --test-scheduled` serves, and the cron expressions it has. */
export interface CronTarget {
  baseUrl: string;
  crons: string[];
}

/** Whether `cron` is due at the start of minute `at` (the two shapes the Workers use). */
function due(cron: string, at: Date): boolean {
  if (cron === '* * * * *') return true;
  if (cron === '0 * * * *') return at.getUTCMinutes() === 0;
  throw new Error(`the dev ticker does not know the schedule ${cron}`);
}

/**
 * Crons do not fire in `wrangler dev`; this ticker calls each Worker's `--test-scheduled`
 * endpoint on the real schedule: "* * * * *" at the top of every minute, "0 * * * *" at
 * minute 0.
 */
export function startCronTicker(targets: CronTarget[], log: (line: string) => void): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const fire = async (baseUrl: string, cron: string) => {
    const url = `${baseUrl}/cdn-cgi/handler/scheduled?cron=${encodeURIComponent(cron).replaceAll('%20', '+')}`;
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(30_000) });
      if (!res.ok) log(`cron ${cron} (${baseUrl}): HTTP ${res.status}`);
    } catch (err) {
      log(`cron ${cron} (${baseUrl}): ${(err as Error).message}`);
    }
  };
  for (const target of targets) for (const cron of target.crons) due(cron, new Date());
  const schedule = () => {
    const now = Date.now();
    const next = Math.ceil((now + 1) / 60_000) * 60_000;
    timer = setTimeout(() => {
      for (const target of targets)
        for (const cron of target.crons) if (due(cron, new Date(next))) void fire(target.baseUrl, cron);
      schedule();
    }, next - now);
  };
  schedule();
  return () => clearTimeout(timer);
}
