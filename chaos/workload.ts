import { randomBytes } from 'node:crypto';
import { buildDelivery, messageRecalledPayload, messageReceivePayload } from '../emulator/events';
import type { AppRecord } from '../emulator/state';
import { signActorToken } from '../workers/auth/sign';
import {
  setMembers,
  upsertActor,
  upsertConversation,
  upsertMessage,
  upsertWorkspace,
} from '../workers/reaction-tickets/directory';
import { mintOperationId } from '../workers/reaction-tickets/operation-id';
import type { Queryable } from '../workers/reaction-tickets/types';
import type { Step } from './schedule';
import { SECRETS, World } from './world';

/**
 * The workload of a schedule and the model the invariants compare against: what was sent,
 * what was answered, what the world must therefore look like after the schedule quiesces.
 */
export interface Installation {
  id: string;
  app: AppRecord;
  workspaceId: string;
  rotated: boolean;
  /**
   * A secret rotated at Lark whose rotate request to the service got no 2xx (lost in a restart,
   * refused under a fault): the operator retries it once the faults are over (operatorRetries).
   */
  pendingSecret?: string;
  deleted: boolean;
  /** Reply modes an operator switched the installation to (sent, answered or not). */
  replyModes: ('text' | 'card_stream')[];
}

export interface SentEvent {
  installation: number;
  eventId: string;
  messageId: string;
  request: { headers: Record<string, string>; body: string };
  /** First answer of this event id: 200 means the message was accepted. */
  status: number | 'lost';
}

export interface ForeignReaction {
  messageId: string;
  reactionId: string;
}

/** One write of a mobile operation and how it was answered. */
export interface MobileAttempt {
  at: number;
  kind: 'applied' | 'replayed' | 'unknown' | 'refused';
  status: number | 'lost';
  code?: string;
  /** Database time when sent, and the ticket's expiry. */
  sentAtDbMs: number;
}

export interface MobileOp {
  operationId: string;
  actor: number;
  messageId: string;
  emoji: string;
  desired: 'present' | 'absent';
  ticket: string | null;
  expiresAtMs: number | null;
  attempts: MobileAttempt[];
  /** Set when a retirement answered `retired` (the fence is acknowledged). */
  retiredAt: number | null;
}

export interface Model {
  installations: Installation[];
  events: SentEvent[];
  foreign: ForeignReaction[];
  mobile: MobileOp[];
  tokens: string[];
  retention: {
    /** Database times at which a stop was acknowledged (200, confirmed). */
    stopAcks: number[];
    /** Database times at which an enable was sent (answered or not). */
    enableSends: number[];
  };
  /** The operator's controls and users' recalls (issue 33), for the controls invariants. */
  controls: {
    /** Acknowledged pauses: database time after the 200; database time before the next resume was sent. */
    pauses: { inst: number; ackDbMs: number; resumeSentDbMs: number | null }[];
    /** Resumes that drop the backlog (sent, answered or not): events sent before may go unanswered. */
    drops: { inst: number; events: number }[];
    /** Messages a user recalled (the recall sent, answered or not). */
    recalled: Set<string>;
    /** Any pause sent (answered or not). */
    pauseSent?: boolean;
  };
  seq: number;
}

export const MOBILE = {
  workspaceId: 'chaos-ws',
  conversationId: 'chaos-conv',
  actors: ['chaos-a0', 'chaos-a1', 'chaos-a2'],
  messages: ['chaos-m0', 'chaos-m1'],
  emojis: ['👍', '🎉'],
};

export function newModel(): Model {
  return {
    installations: [],
    events: [],
    foreign: [],
    mobile: [],
    tokens: [],
    retention: { stopAcks: [], enableSends: [] },
    controls: { pauses: [], drops: [], recalled: new Set() },
    seq: 0,
  };
}

/** Two Lark installations in two workspaces, the mobile directory, the legacy contract closed. */
export async function setup(world: World, model: Model): Promise<void> {
  world.trace.add('setup');
  for (let i = 0; i < 2; i++) {
    const app = world.lark.state.registerApp({
      app_id: `cli_chaos${i}${World.id()}`,
      app_secret: randomBytes(12).toString('hex'),
      verification_token: randomBytes(12).toString('hex'),
      encrypt_key: randomBytes(12).toString('hex'),
    });
    const res = await world.admin(`register installation ${i}`, 'POST', '/admin/lark/installations', {
      workspace_id: `ws_chaos${i}`,
      app_id: app.app_id,
      app_secret: app.app_secret,
      verification_token: app.verification_token,
      encrypt_key: app.encrypt_key,
    });
    if (res?.status !== 201)
      throw new Error(`setup: installation ${i}: ${res?.status} ${JSON.stringify(res?.body)}`);
    const { installation } = res.body as { installation: { id: string } };
    model.installations.push({
      id: installation.id,
      app,
      workspaceId: `ws_chaos${i}`,
      rotated: false,
      deleted: false,
      replyModes: [],
    });
  }
  const client = await world.db.connect();
  try {
    const db = client as unknown as Queryable;
    await client.query('begin');
    await upsertWorkspace(db, { id: MOBILE.workspaceId, name: 'chaos' });
    for (const a of MOBILE.actors)
      await upsertActor(db, { id: a, workspaceId: MOBILE.workspaceId, displayName: a });
    await upsertConversation(db, {
      id: MOBILE.conversationId,
      workspaceId: MOBILE.workspaceId,
      title: 'chaos',
    });
    await setMembers(db, MOBILE.conversationId, MOBILE.actors, []);
    for (const m of MOBILE.messages)
      await upsertMessage(db, {
        id: m,
        conversationId: MOBILE.conversationId,
        authorActorId: MOBILE.actors[0]!,
        body: m,
      });
    await client.query('commit');
  } finally {
    client.release();
  }
  for (const a of MOBILE.actors)
    model.tokens.push(await signActorToken(SECRETS.ACTOR_JWT_SECRET, a, { ttlSeconds: 30 * 86_400 }));
  const closed = await world.admin('close legacy contract', 'POST', '/admin/reaction-contract/legacy/close');
  if (closed?.status !== 200) throw new Error(`setup: legacy close: ${closed?.status}`);
}

/** The list's `ref`-th entry (wrapping); a negative ref counts from the end. */
function pickRef<T>(list: T[], ref: number): T | undefined {
  if (list.length === 0) return undefined;
  return ref < 0 ? list.at(Math.max(ref, -list.length)) : list[ref % list.length];
}

async function deliver(
  world: World,
  model: Model,
  inst: Installation,
  eventIndex: number,
  payload: unknown,
  messageId: string,
) {
  const request = buildDelivery(inst.app, payload, world.lark.state.now());
  const eventId = (payload as { header: { event_id: string } }).header.event_id;
  const res = await world.call(
    `event ${eventId.slice(0, 8)} msg ${messageId.slice(-6)} inst ${eventIndex}`,
    `/lark/events/${inst.id}`,
    {
      method: 'POST',
      headers: request.headers,
      body: request.body,
    },
  );
  model.events.push({ installation: eventIndex, eventId, messageId, request, status: res?.status ?? 'lost' });
}

/**
 * A resume of the installation (answering or dropping its backlog). The pause windows it closes
 * end when it is sent: a turn may start as soon as it applies, never before it is sent.
 */
export async function resume(
  world: World,
  model: Model,
  i: number,
  backlog: 'answer' | 'drop',
): Promise<boolean> {
  const inst = model.installations[i]!;
  if (inst.deleted) return false;
  const sent = await world.dbNow();
  for (const p of model.controls.pauses)
    if (p.inst === i && p.resumeSentDbMs === null) p.resumeSentDbMs = sent;
  if (backlog === 'drop') model.controls.drops.push({ inst: i, events: model.events.length });
  const res = await world.admin(
    `resume (${backlog}) installation ${i}`,
    'POST',
    `/admin/lark/installations/${inst.id}/resume`,
    {
      operator: 'chaos',
      backlog,
    },
  );
  return res !== null;
}

/** Runs one workload step. Faults are chaos/faults.ts's. */
export async function runWorkload(world: World, model: Model, step: Step): Promise<boolean> {
  switch (step.op) {
    case 'message': {
      const inst = model.installations[step.inst]!;
      const chatId = step.p2p ? `oc_p2p_${step.inst}_${step.chat}` : `oc_group_${step.inst}_${step.chat}`;
      // A burst: several messages of one chat inside one debounce window, to coalesce.
      await Promise.all(
        Array.from({ length: step.burst }, async (_, i) => {
          const msg = world.lark.state.createMessage({
            chat_id: chatId,
            chat_type: step.p2p ? 'p2p' : 'group',
            text: `m${model.seq++} ${i}`,
            sender: { id: `ou_user${step.chat}`, id_type: 'open_id', sender_type: 'user' },
          });
          if (i === 0 && step.foreign !== 'none')
            addForeign(world, model, msg.message_id, step.foreign === 'app');
          const payload = messageReceivePayload(inst.app, msg, world.lark.state.now(), {
            eventId: World.id() + World.id(),
          });
          await deliver(world, model, inst, step.inst, payload, msg.message_id);
        }),
      );
      return true;
    }
    case 'duplicate': {
      const ev = pickRef(model.events, step.ref);
      if (!ev) return false;
      const inst = model.installations[ev.installation]!;
      const res = await world.call(`duplicate ${ev.eventId.slice(0, 8)}`, `/lark/events/${inst.id}`, {
        method: 'POST',
        headers: ev.request.headers,
        body: ev.request.body,
      });
      // A first delivery whose answer was lost is answered now.
      if (ev.status === 'lost' && res) ev.status = res.status;
      return true;
    }
    case 'redeliver': {
      const ev = pickRef(model.events, step.ref);
      const msg = ev && world.lark.state.messages.get(ev.messageId);
      if (!ev || !msg) return false;
      const inst = model.installations[ev.installation]!;
      const payload = messageReceivePayload(inst.app, msg, world.lark.state.now(), {
        eventId: World.id() + World.id(),
      });
      await deliver(world, model, inst, ev.installation, payload, msg.message_id);
      return true;
    }
    case 'foreign_reaction': {
      const ev = pickRef(model.events, step.ref);
      if (!ev) return false;
      addForeign(world, model, ev.messageId, step.byApp);
      return true;
    }
    case 'rotate': {
      const inst = model.installations[step.inst]!;
      if (inst.deleted) return false;
      const secret = randomBytes(12).toString('hex');
      world.lark.state.rotateSecret(inst.app.app_id, secret, false);
      const res = await world.admin(
        `rotate installation ${step.inst}`,
        'POST',
        `/admin/lark/installations/${inst.id}/rotate`,
        {
          app_secret: secret,
        },
      );
      // Lost or refused: the service may still hold the old secret; either way it was rotated at Lark.
      inst.rotated = true;
      inst.pendingSecret = res && res.status < 300 ? undefined : secret;
      return res !== null;
    }
    case 'delete_installation': {
      const inst = model.installations[step.inst]!;
      if (inst.deleted) return false;
      const res = await world.admin(
        `delete installation ${step.inst}`,
        'DELETE',
        `/admin/lark/installations/${inst.id}`,
      );
      // An unanswered delete may have happened: treat it as deleted (the exemptions are wider).
      if (res === null || res.status === 200) inst.deleted = true;
      return true;
    }
    case 'reply_mode': {
      // Streamed card replies (issue 34): the turns that start after the switch answer in a card.
      const inst = model.installations[step.inst]!;
      if (inst.deleted) return false;
      inst.replyModes.push(step.mode);
      const res = await world.admin(
        `reply mode ${step.mode} installation ${step.inst}`,
        'PATCH',
        `/admin/lark/installations/${inst.id}/settings`,
        { operator: 'chaos', settings: { reply_mode: step.mode } },
      );
      return res !== null;
    }
    case 'setting': {
      const inst = model.installations[step.inst]!;
      if (inst.deleted) return false;
      const res = await world.admin(
        `setting ${step.setting}=${step.value} installation ${step.inst}`,
        'PATCH',
        `/admin/lark/installations/${inst.id}/settings`,
        { operator: 'chaos', settings: { [step.setting]: step.value } },
      );
      return res !== null;
    }
    case 'pause': {
      const inst = model.installations[step.inst]!;
      if (inst.deleted) return false;
      model.controls.pauseSent = true;
      const res = await world.admin(
        `pause installation ${step.inst}`,
        'POST',
        `/admin/lark/installations/${inst.id}/pause`,
        {
          operator: 'chaos',
        },
      );
      // Acknowledged: from here no turn of the installation may start until a resume is sent.
      if (res?.status === 200)
        model.controls.pauses.push({ inst: step.inst, ackDbMs: await world.dbNow(), resumeSentDbMs: null });
      return res !== null;
    }
    case 'resume':
      return resume(world, model, step.inst, step.backlog);
    case 'recall': {
      const ev = pickRef(model.events, step.ref);
      const msg = ev && world.lark.state.messages.get(ev.messageId);
      if (!ev || !msg) return false;
      const inst = model.installations[ev.installation]!;
      // The user withdraws it at Lark, then Lark tells the app (the emulator's own recall).
      msg.recalled = true;
      model.controls.recalled.add(msg.message_id);
      const payload = messageRecalledPayload(
        inst.app,
        { message_id: msg.message_id, chat_id: msg.chat_id },
        world.lark.state.now(),
        { eventId: World.id() + World.id() },
      );
      const request = buildDelivery(inst.app, payload, world.lark.state.now());
      const res = await world.call(`recall ${msg.message_id.slice(-6)}`, `/lark/events/${inst.id}`, {
        method: 'POST',
        headers: request.headers,
        body: request.body,
      });
      return res !== null;
    }
    case 'mobile_write':
      await mobileWrite(
        world,
        model,
        step.actor,
        MOBILE.messages[step.msg]!,
        MOBILE.emojis[step.emoji]!,
        step.desired,
        !step.skipPut,
      );
      return true;
    case 'mobile_replay': {
      const op = pickRef(
        model.mobile.filter((o) => o.ticket),
        step.ref,
      );
      if (!op) return false;
      await mobilePut(world, model, op, 'replay');
      return true;
    }
    case 'mobile_retire': {
      const op = pickRef(
        model.mobile.filter((o) => o.ticket),
        step.ref,
      );
      if (!op) return false;
      const res = await world.call(
        `retire ${op.operationId.slice(-6)}`,
        `/v1/reaction-operations/${op.operationId}/retire`,
        {
          method: 'POST',
          headers: bearer(model.tokens[op.actor]!),
          body: JSON.stringify({ ticket: op.ticket }),
        },
      );
      if (res?.status === 200 && (res.body as { status?: string }).status === 'retired')
        op.retiredAt = Date.now();
      return true;
    }
    case 'sign_out':
      await world.admin(
        `sign out ${step.actor}`,
        'POST',
        `/admin/actors/${MOBILE.actors[step.actor]}/sign-out`,
      );
      return true;
    case 'sign_in': {
      // Issued at database time: a token from before the sign-out (database time) is refused.
      const iat = Math.floor((await world.dbNow()) / 1000) + 1;
      model.tokens[step.actor] = await signActorToken(SECRETS.ACTOR_JWT_SECRET, MOBILE.actors[step.actor]!, {
        issuedAt: iat,
        ttlSeconds: 30 * 86_400,
      });
      world.trace.add(`sign in ${step.actor} (iat ${iat})`);
      return true;
    }
    case 'quota_pressure':
      for (let i = 0; i < step.n; i++)
        await mobileWrite(
          world,
          model,
          step.actor,
          MOBILE.messages[i % 2]!,
          MOBILE.emojis[0]!,
          i % 2 === 0,
          false,
        );
      return true;
    case 'retention_enable': {
      const status = await world.admin(
        'retention status',
        'GET',
        '/admin/retention/status',
        undefined,
        SECRETS.RETENTION_ADMIN_TOKEN,
      );
      const generation = (status?.body as { control?: { generation?: number } } | undefined)?.control
        ?.generation;
      if (typeof generation !== 'number') return false;
      model.retention.enableSends.push(await world.dbNow());
      await world.admin(
        'retention enable',
        'POST',
        '/admin/retention/enable',
        { operator: 'chaos', generation },
        SECRETS.RETENTION_ADMIN_TOKEN,
      );
      return true;
    }
    case 'retention_stop': {
      const res = await world.admin(
        'retention stop',
        'POST',
        '/admin/retention/stop',
        { operator: 'chaos' },
        SECRETS.RETENTION_ADMIN_TOKEN,
      );
      if (res?.status === 200) model.retention.stopAcks.push(await world.dbNow());
      return true;
    }
    case 'retention_stop_midrun':
      return stopMidRun(world, model);
    case 'retention_hourly':
      await timed(world, 'hourly retention cron', () => world.primary.hourlyCron());
      return true;
    case 'crons_overlap': {
      // Every scheduled job at once, on each runtime serving the database: the minute cron,
      // the hourly cleanup and a maintenance pass overlap, as they do at the top of an hour
      // (and on two replicas when the second one runs).
      const runtimes = world.replica ? [world.primary, world.replica] : [world.primary];
      await Promise.all(
        runtimes.flatMap((r, i) => [
          timed(world, `minute cron (overlap ${i})`, () => r.minuteCron()),
          timed(world, `hourly retention cron (overlap ${i})`, () => r.hourlyCron()),
          timed(world, `maintenance pass (overlap ${i})`, () => r.maintenancePass()),
        ]),
      );
      return true;
    }
    case 'minute_cron':
      await timed(world, 'minute cron', () => world.primary.minuteCron());
      return true;
    case 'maintenance':
      await timed(world, 'maintenance pass', () => world.primary.maintenancePass());
      return true;
    case 'settle':
      await new Promise((r) => setTimeout(r, step.ms));
      return true;
    default:
      return false;
  }
}

/** A reaction not ours: another app's Typing badge, or a human's Typing (both must survive). */
function addForeign(world: World, model: Model, messageId: string, byApp: boolean) {
  const operator = byApp
    ? { operator_id: 'cli_someone_else', operator_type: 'app' as const }
    : { operator_id: 'ou_human', operator_type: 'user' as const };
  const r = world.lark.state.addReaction(messageId, 'Typing', operator);
  model.foreign.push({ messageId, reactionId: r.reaction_id });
  world.trace.add(`foreign Typing by ${operator.operator_id} on ${messageId.slice(-6)}`);
}

/** A cron or pass the harness drives: its failure under a fault is recorded, not thrown. */
/**
 * A stop acknowledged while an hourly run's batch is in flight, forced rather than hoped for:
 * a side connection holds every receipt FOR UPDATE, the run's first batch (which holds the
 * control row FOR SHARE) waits on it, the stop is sent, and once the stop's fence waits on that
 * batch the receipts are released. The batch then commits, the fence after it, and a correct
 * run starts no batch after that; a run that skipped its stop check would delete the fence
 * rows in a second batch (retention.no_cleanup_after_stop).
 */
async function stopMidRun(world: World, model: Model): Promise<boolean> {
  const side = await world.db.connect();
  let stop: Promise<{ status: number; body: unknown } | null> | null = null;
  let run: Promise<void> | null = null;
  try {
    await side.query('begin');
    const held = await side.query('select 1 from private.chat_reaction_operations for update');
    if (!held.rowCount) return false;
    const sidePid = (await side.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
    run = timed(world, 'hourly retention cron', () => world.primary.hourlyCron());
    // The batch's lock_timeout is 0.8 × RETENTION_BATCH_TIMEOUT_MS (4 s): both waits fit in it.
    const batchPid = await blockedBy(world, sidePid, 2_500);
    if (batchPid === null) world.trace.add('stop mid-run: no batch waited on the held receipts');
    else {
      stop = world.admin(
        'retention stop',
        'POST',
        '/admin/retention/stop',
        { operator: 'chaos' },
        SECRETS.RETENTION_ADMIN_TOKEN,
      );
      const fencePid = await blockedBy(world, batchPid, 1_200);
      world.trace.add(
        fencePid === null
          ? 'stop mid-run: the fence did not queue behind the batch in time'
          : 'stop mid-run: the fence waits on the batch',
      );
    }
  } finally {
    // By design: a rollback on a connection already closed has nothing left to release.
    await side.query('rollback').catch(() => undefined);
    side.release();
  }
  const res = stop ? await stop : null;
  if (res?.status === 200) model.retention.stopAcks.push(await world.dbNow());
  if (run) await run;
  return true;
}

/** A backend of this database waiting on `pid`'s lock, polled until `ms` pass; null if none. */
async function blockedBy(world: World, pid: number, ms: number): Promise<number | null> {
  const until = Date.now() + ms;
  for (;;) {
    const { rows } = await world.db.query<{ pid: number }>(
      'select pid from pg_stat_activity where datname = current_database() and $1 = any(pg_blocking_pids(pid)) limit 1',
      [pid],
    );
    if (rows[0]) return rows[0].pid;
    if (Date.now() >= until) return null;
    await new Promise((r) => setTimeout(r, 20));
  }
}

export async function timed(world: World, what: string, run: () => Promise<void>): Promise<void> {
  try {
    await run();
    world.trace.add(`${what}: done`);
  } catch (err) {
    world.trace.add(`${what}: failed (${(err as Error).message.slice(0, 120)})`);
  }
}

function bearer(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
}

async function mobileWrite(
  world: World,
  model: Model,
  actor: number,
  messageId: string,
  emoji: string,
  present: boolean,
  put: boolean,
) {
  const operationId = mintOperationId(await world.dbNow());
  const desired = present ? ('present' as const) : ('absent' as const);
  const res = await world.call(
    `ticket ${operationId.slice(-6)} a${actor} ${messageId} ${desired}`,
    '/v1/reaction-tickets',
    {
      method: 'POST',
      headers: bearer(model.tokens[actor]!),
      body: JSON.stringify({ operationId, messageId, emoji, desired }),
    },
  );
  const body = res?.body as { ticket?: string; expiresAt?: string } | undefined;
  const op: MobileOp = {
    operationId,
    actor,
    messageId,
    emoji,
    desired,
    ticket: body?.ticket ?? null,
    expiresAtMs: body?.expiresAt ? Date.parse(body.expiresAt) : null,
    attempts: [],
    retiredAt: null,
  };
  model.mobile.push(op);
  if (put && op.ticket) await mobilePut(world, model, op, 'write');
}

async function mobilePut(world: World, model: Model, op: MobileOp, what: string) {
  const sentAtDbMs = await world.dbNow();
  const res = await world.call(
    `${what} ${op.operationId.slice(-6)} a${op.actor} ${op.messageId} ${op.desired}`,
    `/v1/reaction-operations/${op.operationId}`,
    {
      method: 'PUT',
      headers: bearer(model.tokens[op.actor]!),
      body: JSON.stringify({
        ticket: op.ticket,
        messageId: op.messageId,
        emoji: op.emoji,
        desired: op.desired,
      }),
    },
  );
  const code = (res?.body as { error?: { code?: string } } | undefined)?.error?.code;
  const kind =
    res === null || res.status >= 500
      ? 'unknown'
      : res.status === 200
        ? (res.body as { replayed?: boolean }).replayed
          ? 'replayed'
          : 'applied'
        : 'refused';
  op.attempts.push({ at: Date.now(), kind, status: res?.status ?? 'lost', code, sentAtDbMs });
}

/**
 * What an operator does after the incident, before the quiesce walk: a rotation whose request
 * got no 2xx is sent again (the secret at Lark is already the new one; without it the service
 * holds a secret Lark refuses and can withdraw nothing). Faults are off by then.
 */
export async function operatorRetries(world: World, model: Model): Promise<void> {
  for (const [i, inst] of model.installations.entries()) {
    if (inst.deleted || !inst.pendingSecret) continue;
    const res = await world.admin(
      `operator retries rotate installation ${i}`,
      'POST',
      `/admin/lark/installations/${inst.id}/rotate`,
      {
        app_secret: inst.pendingSecret,
      },
    );
    if (res && res.status < 300) inst.pendingSecret = undefined;
  }
  // An installation a pause may still hold (a pause whose answer was lost counts too): resumed,
  // answering its backlog, as an operator ends an incident. Every later turn is legitimate.
  if (model.controls.pauseSent)
    for (const i of model.installations.keys()) await resume(world, model, i, 'answer');
}
