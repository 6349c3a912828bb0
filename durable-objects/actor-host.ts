import { DurableObject } from 'cloudflare:workers';
import type { Env } from '../workers/env';

/** One per actor instance: wake-ups, debounce timers, mailbox drain and effect heartbeats. */
export class ActorHost extends DurableObject<Env> {}
