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

async function fire(baseUrl: string, cron: string, log: (line: string) => void): Promise<void> {
  const url = `${baseUrl}/cdn-cgi/handler/scheduled?cron=${encodeURIComponent(cron).replaceAll('%20', '+')}`;
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(30_000) });
    if (!res.ok) log(`cron ${cron} (${baseUrl}): HTTP ${res.status}`);
  } catch (err) {
    // Handled by design: the next minute's tick runs the same passes; the line says why.
    log(`cron ${cron} (${baseUrl}): ${(err as Error).message}`);
  }
}

/**
 * The minute passes, once, for a runtime that just (re)started. workerd does not fire a
 * Durable Object alarm that came due while it was down (cloudflare/workers-sdk#5948,
 * cloudflare/workerd#3138; Cloudflare itself runs an overdue alarm), so a host whose debounce
 * timer passed during a restart would wait for the next minute's poll. The poll finds every
 * instance with a due timer or message and schedules its host: the debounce is then answered
 * as in production, at once.
 */
export async function fireStartupPasses(targets: CronTarget[], log: (line: string) => void): Promise<void> {
  await Promise.all(
    targets.flatMap((t) => t.crons.filter((c) => c === '* * * * *').map((c) => fire(t.baseUrl, c, log))),
  );
}

/**
 * Crons do not fire in `wrangler dev`; this ticker calls each Worker's `--test-scheduled`
 * endpoint on the real schedule: "* * * * *" at the top of every minute, "0 * * * *" at
 * minute 0.
 */
export function startCronTicker(targets: CronTarget[], log: (line: string) => void): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  for (const target of targets) for (const cron of target.crons) due(cron, new Date());
  const schedule = () => {
    const now = Date.now();
    const next = Math.ceil((now + 1) / 60_000) * 60_000;
    timer = setTimeout(() => {
      for (const target of targets)
        for (const cron of target.crons) if (due(cron, new Date(next))) void fire(target.baseUrl, cron, log);
      schedule();
    }, next - now);
  };
  schedule();
  return () => clearTimeout(timer);
}
