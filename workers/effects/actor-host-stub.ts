import type { Env } from '../env';

/**
 * The Worker side of the ActorHost Durable Object: the host of `instanceId` (idFromName of
 * the instance id). Callers wake it after a commit gives the instance work; the class itself
 * (durable-objects/actor-host.ts) is only ever reached through this binding.
 */
export function actorHostStub(env: Env, instanceId: string) {
  return env.ACTOR_HOST.get(env.ACTOR_HOST.idFromName(instanceId));
}
