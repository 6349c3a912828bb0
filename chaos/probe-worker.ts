/**
 * The chaos run's maintenance door (never deployed): runs the TypingMaintenance pass
 * (`runTypingMaintenance`, the code its alarm runs) on request, in workerd, with the main
 * Worker's bindings. The chaos harness needs a pass at a moment it chooses, and a Durable
 * Object's `alarm` cannot be called over RPC; the alarm wrapper adds only the 30-second
 * cadence and the enable/stop admission, which no chaos step changes.
 */
import type { Env } from '../workers/env';
import { runTypingMaintenance } from '../workers/typing-ledger/maintenance';

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    if (new URL(request.url).pathname !== '/maintenance') return new Response('not found', { status: 404 });
    const report = await runTypingMaintenance(env, { admit: () => true });
    return Response.json(report);
  },
} satisfies ExportedHandler<Env>;
