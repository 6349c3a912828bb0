import fc from 'fast-check';

/**
 * A schedule: the steps one chaos run performs, in order, on a fresh database. Generated from
 * the run's seed by fast-check, whose shrinker reduces a failing schedule (fewer steps,
 * smaller numbers) to a short one that still fails. Steps that refer to earlier work (`ref`)
 * pick it modulo what exists when they run, so any subsequence is still a valid schedule.
 */
export const LARK_ROUTES = [
  'token',
  'reactions.create',
  'reactions.delete',
  'reactions.list',
  'reply',
  'cardkit.create',
  'cardkit.content',
  'cardkit.settings',
  'cardkit.update',
  'cardkit.batch_update',
] as const;
/** The CardKit routes a streamed reply calls: create, the pushes, the finish, the settlement's finish. */
export const CARD_ROUTES = [
  'cardkit.create',
  'cardkit.content',
  'cardkit.update',
  'cardkit.settings',
] as const;
export const LARK_FAULTS = ['5xx', '429', 'expired_token', 'lost_response', 'latency', 'timeout'] as const;
/**
 * Statements a database cut can be armed on: the webhook's, the flush's, the ledger's, the
 * cleanup's, a streamed reply's card record (its insert, sequence reservations, sent, finished).
 */
export const DB_MARKERS = {
  webhook: 'insert into lark_event_receipts',
  turn: 'channel_turns',
  ledger: 'update channel_typing_reaction',
  effects: 'update effects',
  reaction: 'private.message_reactions',
  cleanup: 'delete from private.chat_',
  card: 'channel_reply_cards',
} as const;
export const LOCK_TABLES = [
  'channel_typing_reaction',
  'effects',
  'actor_instances',
  'private.messages',
  'channel_reply_cards',
] as const;
/**
 * Where a restart lands: between steps, or with a Lark call in flight (the Typing Add, the
 * reply post, which also sends a card; a card's create, a push to its element, its finish).
 */
export const RESTART_POINTS = [
  'now',
  'typing_add',
  'reply',
  'card_create',
  'card_push',
  'card_finish',
] as const;

export type Step =
  // Lark workload
  | {
      op: 'message';
      inst: number;
      chat: number;
      p2p: boolean;
      burst: number;
      foreign: 'none' | 'human' | 'app';
    }
  | { op: 'duplicate'; ref: number }
  | { op: 'redeliver'; ref: number }
  | { op: 'foreign_reaction'; ref: number; byApp: boolean }
  | { op: 'rotate'; inst: number }
  | { op: 'delete_installation'; inst: number }
  | { op: 'reply_mode'; inst: number; mode: 'text' | 'card_stream' }
  /** Operator controls (issue 33): a setting changed, a pause, a resume, a user's recall. */
  | {
      op: 'setting';
      inst: number;
      setting: 'failure_notice' | 'typing_badge' | 'recall_reply';
      value: string;
    }
  | { op: 'pause'; inst: number }
  | { op: 'resume'; inst: number; backlog: 'answer' | 'drop' }
  | { op: 'recall'; ref: number }
  // mobile workload
  | { op: 'mobile_write'; actor: number; msg: number; emoji: number; desired: boolean; skipPut: boolean }
  | { op: 'mobile_replay'; ref: number }
  | { op: 'mobile_retire'; ref: number }
  | { op: 'sign_out'; actor: number }
  | { op: 'sign_in'; actor: number }
  | { op: 'quota_pressure'; actor: number; n: number }
  // retention and schedules
  | { op: 'retention_enable' }
  | { op: 'retention_stop' }
  | { op: 'retention_stop_midrun' }
  | { op: 'crons_overlap' }
  | { op: 'retention_hourly' }
  | { op: 'minute_cron' }
  | { op: 'maintenance' }
  | { op: 'settle'; ms: number }
  // faults
  | {
      op: 'lark_fault';
      route: (typeof LARK_ROUTES)[number] | 'cardkit.*' | '*';
      kind: (typeof LARK_FAULTS)[number];
      times: number;
    }
  | { op: 'db_cut' }
  | { op: 'db_cut_at'; marker: keyof typeof DB_MARKERS; phase: 'request' | 'reply' }
  | { op: 'db_lock'; table: (typeof LOCK_TABLES)[number]; ms: number }
  | { op: 'restart'; at: (typeof RESTART_POINTS)[number] }
  | { op: 'do_storage_lost' }
  | { op: 'replica'; on: boolean }
  // The runtime restarted as the other release (issue 31 item 2), its objects keeping their storage.
  | { op: 'mixed_versions' }
  | { op: 'clock'; ms: number };

export type StepKind = Step['op'];
export const FAULT_OPS: ReadonlySet<StepKind> = new Set([
  'lark_fault',
  'db_cut',
  'db_cut_at',
  'db_lock',
  'restart',
  'do_storage_lost',
  'replica',
  'mixed_versions',
  'clock',
]);

export interface Schedule {
  steps: Step[];
}

const ref = fc.nat(15);
/** A badge of someone else's on the message before ours: a human's reaction, another app's Typing. */
const foreignArb = fc.constantFrom('none' as const, 'human' as const, 'app' as const);
const inst = fc.nat(1);
const actor = fc.nat(2);

/** A mobile write by one of the actors; `skipPut` decides whether the ticket is ever used. */
const mobileWriteArb = (skipPut: fc.Arbitrary<boolean>) =>
  fc.record({
    op: fc.constant('mobile_write' as const),
    actor,
    msg: fc.nat(1),
    emoji: fc.nat(1),
    desired: fc.boolean(),
    skipPut,
  });

/** An operator's change of one of the settings the controls chaos covers (issue 33). */
const settingArb: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    op: fc.constant('setting' as const),
    inst,
    setting: fc.constant('failure_notice' as const),
    value: fc.constantFrom('none', 'reaction', 'reply'),
  }),
  fc.record({
    op: fc.constant('setting' as const),
    inst,
    setting: fc.constant('typing_badge' as const),
    value: fc.constantFrom('on', 'off', 'quiet'),
  }),
  fc.record({
    op: fc.constant('setting' as const),
    inst,
    setting: fc.constant('recall_reply' as const),
    value: fc.constantFrom('off', 'on'),
  }),
);

const workload: fc.Arbitrary<Step>[] = [
  fc.record({
    op: fc.constant('message' as const),
    inst,
    chat: fc.nat(2),
    p2p: fc.boolean(),
    burst: fc.integer({ min: 1, max: 4 }),
    foreign: foreignArb,
  }),
  fc.record({ op: fc.constant('duplicate' as const), ref }),
  fc.record({ op: fc.constant('redeliver' as const), ref }),
  fc.record({ op: fc.constant('foreign_reaction' as const), ref, byApp: fc.boolean() }),
  fc.record({ op: fc.constant('rotate' as const), inst }),
  fc.record({ op: fc.constant('delete_installation' as const), inst }),
  mobileWriteArb(fc.boolean()),
  fc.record({ op: fc.constant('mobile_replay' as const), ref }),
  fc.record({ op: fc.constant('mobile_retire' as const), ref }),
  fc.record({ op: fc.constant('sign_out' as const), actor }),
  fc.record({ op: fc.constant('sign_in' as const), actor }),
  fc.record({ op: fc.constant('quota_pressure' as const), actor, n: fc.integer({ min: 2, max: 12 }) }),
  fc.constant({ op: 'retention_enable' as const }),
  fc.constant({ op: 'retention_stop' as const }),
  fc.constant({ op: 'retention_hourly' as const }),
  fc.constant({ op: 'minute_cron' as const }),
  fc.constant({ op: 'crons_overlap' as const }),
  fc.constant({ op: 'maintenance' as const }),
  fc.record({ op: fc.constant('settle' as const), ms: fc.integer({ min: 50, max: 1500 }) }),
  fc.record({
    op: fc.constant('reply_mode' as const),
    inst,
    mode: fc.constantFrom('text' as const, 'card_stream' as const),
  }),
  settingArb,
  fc.record({ op: fc.constant('pause' as const), inst }),
  fc.record({
    op: fc.constant('resume' as const),
    inst,
    backlog: fc.constantFrom('answer' as const, 'drop' as const),
  }),
  fc.record({ op: fc.constant('recall' as const), ref }),
];

const faults: fc.Arbitrary<Step>[] = [
  fc.record({
    op: fc.constant('lark_fault' as const),
    route: fc.constantFrom(...LARK_ROUTES, 'cardkit.*' as const, '*' as const),
    kind: fc.constantFrom(...LARK_FAULTS),
    times: fc.integer({ min: 1, max: 4 }),
  }),
  fc.constant({ op: 'db_cut' as const }),
  fc.record({
    op: fc.constant('db_cut_at' as const),
    marker: fc.constantFrom(...(Object.keys(DB_MARKERS) as (keyof typeof DB_MARKERS)[])),
    phase: fc.constantFrom('request' as const, 'reply' as const),
  }),
  fc.record({
    op: fc.constant('db_lock' as const),
    table: fc.constantFrom(...LOCK_TABLES),
    ms: fc.integer({ min: 200, max: 6000 }),
  }),
  fc.record({ op: fc.constant('restart' as const), at: fc.constantFrom(...RESTART_POINTS) }),
  fc.constant({ op: 'do_storage_lost' as const }),
  fc.record({ op: fc.constant('replica' as const), on: fc.boolean() }),
  fc.constant({ op: 'mixed_versions' as const }),
  fc.record({
    op: fc.constant('clock' as const),
    // A second, past a debounce, past the stale window, past taskless expiry, an hour, a day.
    ms: fc.constantFrom(1_000, 5_000, 31_000, 125_000, 3_600_000, 86_400_000),
  }),
];

/** Workload steps twice as likely as faults: a schedule is mostly work, with faults among it. */
export const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { arbitrary: fc.oneof(...workload), weight: 2 },
  { arbitrary: fc.oneof(...faults), weight: 1 },
);

const DAY = 86_400_000;
const maybe = (a: fc.Arbitrary<Step>) => fc.option(a, { nil: undefined, freq: 2 });
const settle = fc.record({ op: fc.constant('settle' as const), ms: fc.integer({ min: 300, max: 1500 }) });

/**
 * Faults aimed inside one Lark flow: at the Typing Add, the reply, the withdrawal's listing
 * and delete, the token; the runtime restarted with the Add or the reply in flight; the
 * connection cut on the ledger's, the turn's or the effect's statement.
 */
const flowFault: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    op: fc.constant('lark_fault' as const),
    route: fc.constantFrom(
      'reactions.create' as const,
      'reactions.delete' as const,
      'reactions.list' as const,
      'reply' as const,
      'token' as const,
    ),
    kind: fc.constantFrom(...LARK_FAULTS),
    times: fc.integer({ min: 1, max: 3 }),
  }),
  fc.record({
    op: fc.constant('restart' as const),
    at: fc.constantFrom('typing_add' as const, 'reply' as const),
  }),
  fc.record({
    op: fc.constant('db_cut_at' as const),
    marker: fc.constantFrom('ledger' as const, 'turn' as const, 'effects' as const, 'webhook' as const),
    phase: fc.constantFrom('request' as const, 'reply' as const),
  }),
);

/** Episodes: short flows of the workload with faults at their named points. */
const larkEpisode = fc
  .tuple(maybe(flowFault), workload[0]!, maybe(flowFault), maybe(settle))
  .map((xs) => xs.filter((x): x is Step => x !== undefined));

/**
 * A streamed reply's flow (issue 34): an installation switched to `card_stream`, a message, and
 * faults at the card's named points: CardKit refusing, limiting, losing answers or holding the
 * create, a push or the finish, the runtime restarted with one of them (or the card's send) in
 * flight, the connection cut on the turn's statement.
 */
const cardFault: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    op: fc.constant('lark_fault' as const),
    route: fc.constantFrom(...CARD_ROUTES, 'cardkit.*' as const, 'reply' as const),
    kind: fc.constantFrom(...LARK_FAULTS),
    times: fc.integer({ min: 1, max: 3 }),
  }),
  fc.record({
    op: fc.constant('restart' as const),
    at: fc.constantFrom(
      'card_create' as const,
      'card_push' as const,
      'card_finish' as const,
      'reply' as const,
    ),
  }),
  fc.record({
    op: fc.constant('db_cut_at' as const),
    marker: fc.constantFrom('turn' as const, 'effects' as const, 'card' as const),
    phase: fc.constantFrom('request' as const, 'reply' as const),
  }),
);

const streamEpisode = fc
  .tuple(
    fc.record({ op: fc.constant('reply_mode' as const), inst, mode: fc.constant('card_stream' as const) }),
    maybe(cardFault),
    workload[0]!,
    maybe(cardFault),
    maybe(settle),
  )
  .map((xs) => xs.filter((x): x is Step => x !== undefined));

const mobileEpisode = fc
  .tuple(
    workload[6]!,
    maybe(
      fc.oneof(
        fc.constant({ op: 'db_cut' as const }),
        fc.record({
          op: fc.constant('db_cut_at' as const),
          marker: fc.constant('reaction' as const),
          phase: fc.constantFrom('request' as const, 'reply' as const),
        }),
      ),
    ),
    maybe(fc.oneof(workload[7]!, workload[8]!)),
  )
  .map((xs) => xs.filter((x): x is Step => x !== undefined));

/**
 * The cleanup's flow: receipts written, the cleanup enabled, the clock past the receipts'
 * retention, perhaps a stop, a fault, then the hourly run.
 */
const retentionEpisode = fc
  .tuple(
    workload[6]!,
    fc.constant({ op: 'retention_enable' as const }),
    fc.record({ op: fc.constant('clock' as const), ms: fc.constantFrom(31 * DAY, 32 * DAY) }),
    maybe(fc.constant({ op: 'retention_stop' as const })),
    maybe(
      fc.oneof(
        fc.constant({ op: 'restart' as const, at: 'now' as const }),
        fc.record({
          op: fc.constant('db_cut_at' as const),
          marker: fc.constant('cleanup' as const),
          phase: fc.constantFrom('request' as const, 'reply' as const),
        }),
      ),
    ),
    fc.constant({ op: 'retention_hourly' as const }),
  )
  .map((xs) => xs.filter((x): x is Step => x !== undefined));

/**
 * A stop that lands while an hourly run's first batch is in flight: a receipt and a fence both
 * past their retention (the clock moves 91–92 days), so the run has a second batch to start
 * after the stop, and `retention_stop_midrun` forces the interleaving (see workload.ts).
 */
const retentionStopEpisode = fc
  .tuple(
    mobileWriteArb(fc.constant(false)),
    mobileWriteArb(fc.constant(true)),
    // ref -1: the newest ticket, the write just issued and never applied.
    fc.constant({ op: 'mobile_retire' as const, ref: -1 }),
    fc.constant({ op: 'retention_enable' as const }),
    fc.record({ op: fc.constant('clock' as const), ms: fc.constantFrom(91 * DAY, 92 * DAY) }),
    fc.constant({ op: 'retention_stop_midrun' as const }),
  )
  .map((xs): Step[] => xs);

/**
 * The operator's controls against traffic (issue 33): a setting, messages, a pause racing them,
 * perhaps a fault, a user's recall, the resume (answering or dropping the backlog).
 */
const controlsEpisode = fc
  .tuple(
    inst,
    maybe(settingArb),
    workload[0]!,
    workload[0]!,
    maybe(
      fc.oneof(
        fc.constant({ op: 'restart' as const, at: 'now' as const }),
        fc.constant({ op: 'db_cut' as const }),
      ),
    ),
    maybe(fc.record({ op: fc.constant('recall' as const), ref: fc.constantFrom(-1, -2) })),
    fc.constantFrom('answer' as const, 'drop' as const),
    maybe(settle),
  )
  .map(([i, setting, before, during, fault, recall, backlog, after]) =>
    [
      setting,
      before,
      { op: 'pause' as const, inst: i },
      during,
      fault,
      recall,
      { op: 'resume' as const, inst: i, backlog },
      after,
    ].filter((x): x is Step => x !== undefined),
  );

const episode: fc.Arbitrary<Step[]> = fc.oneof(
  { arbitrary: larkEpisode, weight: 3 },
  { arbitrary: streamEpisode, weight: 3 },
  { arbitrary: mobileEpisode, weight: 2 },
  { arbitrary: retentionEpisode, weight: 1 },
  { arbitrary: retentionStopEpisode, weight: 1 },
  { arbitrary: controlsEpisode, weight: 2 },
  { arbitrary: stepArb.map((s) => [s]), weight: 3 },
);

/** Up to `maxParts` episodes or single steps, flattened; shrinking removes whole parts first. */
export function scheduleArb(maxParts: number): fc.Arbitrary<Schedule> {
  return fc.array(episode, { minLength: 1, maxLength: maxParts }).map((parts) => ({ steps: parts.flat() }));
}

/** One line per step, for the trace and the failure report. */
export function describeStep(s: Step): string {
  const { op, ...rest } = s;
  const args = Object.entries(rest)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
  return args ? `${op} ${args}` : op;
}
