import { CARD_INVARIANTS } from './card-invariants';
import type { Model } from './workload';
import type { World } from './world';

/**
 * The invariants checked after a schedule quiesces, each by name. A check returns its
 * violations (empty: it held); `exempt` counts cases the design leaves to an operator.
 */
export interface CheckResult {
  name: string;
  violations: string[];
  exempt?: number;
}

type Check = (world: World, model: Model) => Promise<Omit<CheckResult, 'name'>>;

const RECEIPT_DAYS = 30;
const FENCE_DAYS = 90;
const DRAIN_GRACE_MS = 3_600_000;
const DAY_MS = 86_400_000;

async function rows<T>(world: World, sql: string, params: unknown[] = []): Promise<T[]> {
  return (await world.db.query(sql, params)).rows as T[];
}

const ourApps = (model: Model) => new Set(model.installations.map((i) => i.app.app_id));

export const INVARIANTS: Record<string, Check> = {
  /** No app Typing badge left on any message once Lark is healthy and the windows passed. */
  async 'typing.no_badge_left'(world, model) {
    const apps = ourApps(model);
    const violations: string[] = [];
    let exempt = 0;
    const expired = new Set(
      (
        await rows<{ source_message_id: string }>(
          world,
          `select source_message_id from channel_typing_reaction where retention_outcome = 'expired'
           union select source_message_id from chaos.ledger_expired`,
        )
      ).map((r) => r.source_message_id),
    );
    for (const [messageId, list] of world.lark.state.reactions)
      for (const r of list) {
        if (r.reaction_type.emoji_type !== 'Typing' || r.operator.operator_type !== 'app') continue;
        if (!apps.has(r.operator.operator_id)) continue;
        const inst = model.installations.find((i) => i.app.app_id === r.operator.operator_id)!;
        // docs/typing-ledger.md: rotated, then deleted before the withdrawal, or past the
        // seven-day lifetime in one clock jump: the badge is an operator's (manual removal).
        // A message its user recalled is gone at Lark, with its reactions (the emulator keeps
        // them, and refuses their delete with 231003).
        if (
          (inst.rotated && inst.deleted) ||
          expired.has(messageId) ||
          world.lark.state.messages.get(messageId)?.recalled
        ) {
          exempt++;
          continue;
        }
        const ledger = await rows(
          world,
          `select id, add_state, settled_at, settled_by, settle_outcome, next_attempt_at, attempts, last_error, taskless,
                  reaction_id is not null as has_reaction_id, cleaned_at, abandoned_at
             from channel_typing_reaction where source_message_id = $1`,
          [messageId],
        );
        violations.push(
          `Typing by ${r.operator.operator_id} left on ${messageId}; ledger: ${JSON.stringify(ledger)}`,
        );
      }
    return { violations, exempt };
  },

  /** No reaction deleted that is not the app's own (a human's, another app's). */
  async 'lark.no_foreign_reaction_deleted'(world, model) {
    const violations = model.foreign
      .filter(
        (f) =>
          !(world.lark.state.reactions.get(f.messageId) ?? []).some((r) => r.reaction_id === f.reactionId),
      )
      .map((f) => `foreign reaction ${f.reactionId} on ${f.messageId} deleted`);
    return { violations };
  },

  /** At most one reply per turn (per delivery key), and per anchor no more than its turns. */
  async 'channel.at_most_one_reply_per_turn'(world) {
    const violations: string[] = [];
    const byUuid = new Map<string, number>();
    const byAnchor = new Map<string, number>();
    for (const m of world.lark.state.messages.values()) {
      if (!m.parent_id || m.sender.sender_type !== 'app') continue;
      byAnchor.set(m.parent_id, (byAnchor.get(m.parent_id) ?? 0) + 1);
      if (m.reply_uuid) byUuid.set(m.reply_uuid, (byUuid.get(m.reply_uuid) ?? 0) + 1);
    }
    for (const [uuid, n] of byUuid) if (n > 1) violations.push(`${n} replies with uuid ${uuid}`);
    const turns = await rows<{ anchor_message_id: string; n: number }>(
      world,
      'select anchor_message_id, count(*)::int as n from chaos.turns group by anchor_message_id',
    );
    const turnsAt = new Map(turns.map((t) => [t.anchor_message_id, t.n]));
    for (const [anchor, n] of byAnchor)
      if (n > (turnsAt.get(anchor) ?? 0))
        violations.push(`${n} replies on ${anchor}, ${turnsAt.get(anchor) ?? 0} turn(s)`);
    return { violations };
  },

  /** Every accepted message is in a settled turn: answered (the reply exists) or failed visibly. */
  async 'channel.every_message_answered_or_failed'(world, model) {
    const violations: string[] = [];
    let exempt = 0;
    // A message its user recalled, or in a backlog a `drop` resume may have dropped, may go
    // unanswered by design (issue 33; the controls invariants check those): its failure here
    // is counted as exempt, never its success.
    const dropped = (index: number, installation: number) =>
      model.controls.drops.some((d) => d.inst === installation && index < d.events);
    const accepted = new Set<string>();
    const excusable = new Set<string>();
    for (const [index, e] of model.events.entries()) {
      if (e.status !== 200) continue;
      accepted.add(e.messageId);
      if (model.controls.recalled.has(e.messageId) || dropped(index, e.installation))
        excusable.add(e.messageId);
    }
    const inputs = await rows<{
      message_id: string;
      position: string;
      session_id: string;
      installation_id: string;
    }>(
      world,
      `select distinct on (message_id) message_id, position, session_id, installation_id
         from chaos.inputs where position is not null order by message_id, id desc`,
    );
    const byMessage = new Map(inputs.map((i) => [i.message_id, i]));
    const turns = await rows<{
      session_id: string;
      first_position: string;
      cutoff_position: string;
      outcome: string | null;
      reply_message_id: string | null;
    }>(
      world,
      'select session_id, first_position, cutoff_position, outcome, reply_message_id from chaos.turns',
    );
    for (const messageId of accepted) {
      const input = byMessage.get(messageId);
      if (!input) {
        if (excusable.has(messageId)) exempt++;
        else violations.push(`accepted ${messageId} has no recorded input`);
        continue;
      }
      const pos = Number(input.position);
      const turn = turns.find(
        (t) =>
          t.session_id === input.session_id &&
          Number(t.first_position) <= pos &&
          pos <= Number(t.cutoff_position),
      );
      const inst = model.installations.find((i) => i.id === input.installation_id);
      if (!turn || turn.outcome === null) {
        // A deleted installation's conversation cannot be answered; its input stays unturned.
        if (inst?.deleted || excusable.has(messageId)) exempt++;
        else
          violations.push(
            `accepted ${messageId} (pos ${pos}) ${turn ? 'in an unsettled turn' : 'in no turn'}`,
          );
        continue;
      }
      if (
        turn.outcome === 'delivered' &&
        (!turn.reply_message_id || !world.lark.state.messages.has(turn.reply_message_id))
      )
        violations.push(`turn of ${messageId} delivered, but reply ${turn.reply_message_id} is not at Lark`);
    }
    return { violations, exempt };
  },

  /** Every ledger row terminal, or pending within its lifetime. */
  async 'ledger.terminal_or_pending_in_lifetime'(world) {
    const bad = await rows<{ id: string }>(
      world,
      `select id from channel_typing_reaction
        where cleaned_at is null and abandoned_at is null and expires_at <= app_now()`,
    );
    return { violations: bad.map((r) => `ledger row ${r.id} pending past its lifetime`) };
  },

  /** No snapshot on (or written after) a terminal row. */
  async 'ledger.no_snapshot_after_terminal'(world) {
    const now = await rows<{ id: string }>(
      world,
      `select id from channel_typing_reaction
        where (cleaned_at is not null or abandoned_at is not null) and credential_snapshot is not null`,
    );
    const seen = await rows<{ row_id: string }>(
      world,
      'select row_id from chaos.ledger_transitions where snapshot_after_terminal',
    );
    return {
      violations: [...now.map((r) => r.id), ...seen.map((r) => r.row_id)].map(
        (id) => `snapshot on terminal row ${id}`,
      ),
    };
  },

  /** No terminal ledger row made live again. */
  async 'ledger.no_revival'(world) {
    const seen = await rows<{ row_id: string }>(
      world,
      'select row_id from chaos.ledger_transitions where revived',
    );
    return { violations: seen.map((r) => `terminal row ${r.row_id} revived`) };
  },

  /** No retired or expired mobile operation applied. */
  async 'mobile.no_retired_or_expired_applied'(_world, model) {
    const violations: string[] = [];
    for (const op of model.mobile)
      for (const a of op.attempts) {
        if (a.kind !== 'applied') continue;
        if (op.retiredAt !== null && a.at > op.retiredAt)
          violations.push(`operation ${op.operationId} applied after its retirement was acknowledged`);
        if (op.expiresAtMs !== null && a.sentAtDbMs > op.expiresAtMs)
          violations.push(`operation ${op.operationId} applied after its ticket expired`);
      }
    return { violations };
  },

  /** The message's reactions equal the last admitted choice per actor (an unknown answer allows either). */
  async 'mobile.reactions_equal_last_choice'(world, model) {
    const violations: string[] = [];
    const present = new Set(
      (
        await rows<{ message_id: string; actor_id: string; emoji: string }>(
          world,
          'select message_id, actor_id, emoji from private.message_reactions',
        )
      ).map((r) => `${r.message_id}|${r.actor_id}|${r.emoji}`),
    );
    const attempts = model.mobile
      .flatMap((op) => op.attempts.map((a) => ({ op, a })))
      .sort((x, y) => x.a.at - y.a.at);
    const allowed = new Map<string, Set<boolean>>();
    for (const { op, a } of attempts) {
      const key = `${op.messageId}|chaos-a${op.actor}|${op.emoji}`;
      const want = op.desired === 'present';
      if (a.kind === 'applied') allowed.set(key, new Set([want]));
      else if (a.kind === 'unknown')
        (allowed.get(key) ?? allowed.set(key, new Set([false])).get(key)!).add(want);
    }
    for (const [key, ok] of allowed) {
      const is = present.has(key);
      if (!ok.has(is))
        violations.push(
          `${key} is ${is ? 'present' : 'absent'}; admitted choices allow ${[...ok].join('/')}`,
        );
    }
    return { violations };
  },

  /** No receipt or fence deleted before its eligibility. */
  async 'retention.no_early_delete'(world) {
    const deleted = await rows<{
      tbl: string;
      at: Date;
      row_data: { created_at: string; ticket_expires_at: string | null; operation_id: string };
    }>(world, 'select tbl, at, row_data from chaos.retention_deletes');
    const violations: string[] = [];
    for (const d of deleted) {
      const days = d.tbl === 'chat_reaction_operations' ? RECEIPT_DAYS : FENCE_DAYS;
      const at = d.at.getTime();
      const created = Date.parse(d.row_data.created_at);
      const ticketEnd = d.row_data.ticket_expires_at ? Date.parse(d.row_data.ticket_expires_at) : null;
      if (created + days * DAY_MS > at)
        violations.push(
          `${d.tbl} ${d.row_data.operation_id} deleted ${((at - created) / DAY_MS).toFixed(2)} days after creation`,
        );
      else if (ticketEnd !== null && ticketEnd + DRAIN_GRACE_MS > at)
        violations.push(`${d.tbl} ${d.row_data.operation_id} deleted before its ticket expiry + drain grace`);
    }
    return { violations };
  },

  /**
   * The cleanup never deleted after an acknowledged stop (unless enabled again after it), and
   * never while the committed control row said stopped: a stop's database fence waits for the
   * batch in flight, so only a batch started after the fence can see it.
   */
  async 'retention.no_cleanup_after_stop'(world, model) {
    const deleted = await rows<{ at: Date; tbl: string; control_enabled: boolean | null }>(
      world,
      'select at, tbl, control_enabled from chaos.retention_deletes',
    );
    const violations: string[] = [];
    for (const d of deleted) {
      if (d.control_enabled === false) {
        violations.push(`${d.tbl} row deleted after the stop's fence committed (control row disabled)`);
        continue;
      }
      const at = d.at.getTime();
      const stop = model.retention.stopAcks.filter((s) => s < at).at(-1);
      if (stop === undefined) continue;
      if (model.retention.enableSends.some((e) => e > stop && e < at)) continue;
      violations.push(`${d.tbl} row deleted ${at - stop} ms after a stop was acknowledged`);
    }
    return { violations };
  },

  /** No deadlock (40P01) in this schedule's database. */
  async 'db.no_deadlock'(world) {
    const [r] = await rows<{ deadlocks: string }>(
      world,
      'select deadlocks from pg_stat_database where datname = current_database()',
    );
    const logged = world.logs.filter((l) => JSON.stringify(l).includes('40P01')).length;
    const violations: string[] = [];
    if (Number(r?.deadlocks ?? 0) > 0) violations.push(`${r!.deadlocks} deadlock(s) in pg_stat_database`);
    if (logged > 0) violations.push(`${logged} log line(s) name 40P01`);
    return { violations };
  },

  /** No 5xx but under an injected database fault or restart (503 retry answers). */
  async 'http.no_unexpected_5xx'(world) {
    const violations = world.answers
      .filter((a) => typeof a.status === 'number' && a.status >= 500 && !(a.underFault && a.status === 503))
      .map(
        (a) =>
          `step ${a.step}: ${a.what} → ${a.status} ${a.code ?? ''}${a.underFault ? ' (under fault)' : ''}`,
      );
    return { violations };
  },

  /** Every effect terminal, scheduled later, or owned by a live process. */
  async 'effects.terminal_or_owned'(world) {
    const bad = await rows<{ id: string; status: string; kind: string }>(
      world,
      `select e.id, e.status, e.kind from effects e
        where e.status = 'processing' and not exists (
                select 1 from effect_processes p
                 where p.id = e.locked_by and p.stopped_at_ms is null
                   and p.heartbeat_at_ms >= app_now_ms() - 30000)
           or (e.status = 'pending' and e.run_at_ms <= app_now_ms())`,
    );
    return { violations: bad.map((e) => `effect ${e.id} (${e.kind}) ${e.status}, no live owner`) };
  },

  /** Every retirement has exactly one recovery message. */
  async 'effects.one_recovery_per_retirement'(world) {
    const bad = await rows<{ effect_id: string; n: number }>(
      world,
      `select r.effect_id, count(m.id)::int as n
         from effect_recoveries r
         left join chaos.recovery_messages m
           on m.instance_id = r.origin_instance_id and m.message_key = 'effect:' || r.effect_id || ':recovery'
        where r.retired_at_ms is not null
        group by r.effect_id having count(m.id) <> 1`,
    );
    return { violations: bad.map((r) => `retired effect ${r.effect_id}: ${r.n} recovery messages`) };
  },

  /**
   * Rows per table within the retention rules (docs/retention-rules.md): after the quiesce walk
   * (whose last stop runs the minute cron's housekeeping and a maintenance pass) no row is
   * older than its table's rule allows, beyond the rule's period plus a 10-minute slack; and
   * no table grows beyond the work done (a backstop for the rules that depend on use).
   */
  /** Issue 33: no turn of an installation starts after its pause was acknowledged, until a resume is sent. */
  async 'controls.no_turn_while_paused'(world, model) {
    const violations: string[] = [];
    for (const p of model.controls.pauses) {
      const inst = model.installations[p.inst]!;
      const started = await rows<{ session_id: string; turn_no: number; started_ms: string }>(
        world,
        `select t.session_id, t.turn_no, (extract(epoch from t.started_at) * 1000)::bigint::text as started_ms
           from chaos.turns t
          where t.session_id in (select distinct session_id from chaos.inputs where installation_id = $1)
            and t.started_at > to_timestamp($2 / 1000.0)
            and ($3::bigint is null or t.started_at < to_timestamp($3 / 1000.0))`,
        [inst.id, p.ackDbMs, p.resumeSentDbMs],
      );
      for (const t of started)
        violations.push(
          `turn ${t.session_id}#${t.turn_no} started at ${t.started_ms}, after the pause acknowledged at ${p.ackDbMs} (resume sent ${p.resumeSentDbMs ?? 'never'})`,
        );
    }
    return { violations };
  },

  /** Issue 33: a failure notice is never decided for a turn whose reply was delivered. */
  async 'controls.no_notice_for_delivered_turn'(world) {
    const found = await rows<{ session_id: string; turn_no: number; kind: string }>(
      world,
      `select n.session_id, n.turn_no, n.kind from channel_failure_notices n
         join chaos.turns t on t.session_id = n.session_id and t.turn_no = n.turn_no
        where t.outcome = 'delivered'`,
    );
    return {
      violations: found.map(
        (n) => `a ${n.kind} failure notice for delivered turn ${n.session_id}#${n.turn_no}`,
      ),
    };
  },

  /** Issue 33: at most one notice per failed turn at Lark (a reply by its own uuid, or one reaction). */
  async 'controls.at_most_one_notice_per_failed_turn'(world, model) {
    const violations: string[] = [];
    const apps = ourApps(model);
    const notices = await rows<{ message_id: string; n: number }>(
      world,
      `select message_id, count(*)::int as n from channel_failure_notices where kind = 'reaction' group by message_id`,
    );
    for (const { message_id, n } of notices) {
      const ours = (world.lark.state.reactions.get(message_id) ?? []).filter(
        (r) =>
          r.reaction_type.emoji_type === 'CrossMark' &&
          r.operator.operator_type === 'app' &&
          apps.has(r.operator.operator_id),
      ).length;
      if (ours > n) violations.push(`${ours} failure reactions on ${message_id} for ${n} failed turn(s)`);
    }
    // Replies: each notice posts with its own uuid; two messages with one uuid are caught by
    // channel.at_most_one_reply_per_turn, which counts every uuid.
    return { violations };
  },

  async 'tables.bounded'(world, model) {
    const violations: string[] = [];
    for (const r of RETENTION_RULES) {
      const [row] = await rows<{ n: number }>(
        world,
        `select count(*)::int as n from ${r.table} where ${r.overdue}`,
      );
      if (row && row.n > 0) violations.push(`${r.table}: ${row.n} row(s) kept past its rule (${r.rule})`);
    }
    const work = model.events.length + model.mobile.length * 2 + 10;
    const counts = await rows<{ relname: string; n: string }>(
      world,
      `select c.relname, (xpath('/row/n/text()', query_to_xml(format('select count(*) as n from %I.%I', n.nspname, c.relname), false, true, '')))[1]::text as n
         from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where c.relkind = 'r' and n.nspname in ('public', 'private')`,
    );
    for (const c of counts)
      if (Number(c.n) > 20 * work) violations.push(`${c.relname}: ${c.n} rows for ${work} units of work`);
    return { violations };
  },
};

/**
 * The time-based rules of docs/retention-rules.md, as the rows a pruner should have deleted by
 * now (default periods of wrangler.toml and the runtimes). Rules that depend on use (inputs,
 * turns, conversations) and the retention cleanup (its own invariants) are not listed.
 */
const SLACK = "interval '10 minutes'";
const SLACK_MS = 600_000;
const RETENTION_RULES: { table: string; rule: string; overdue: string }[] = [
  {
    table: 'channel_typing_reaction',
    rule: 'terminal rows 7 days after cleaned or abandoned',
    overdue: `coalesce(cleaned_at, abandoned_at) < app_now() - interval '7 days' - ${SLACK}`,
  },
  {
    table: 'channel_typing_settlement',
    rule: '7 days after created_at',
    overdue: `created_at < app_now() - interval '7 days' - ${SLACK}`,
  },
  {
    table: 'lark_rate_limits',
    rule: 'once not_before has passed',
    overdue: `not_before < app_now() - ${SLACK}`,
  },
  {
    table: 'lark_event_receipts',
    rule: '24 h after received_at',
    overdue: `received_at < app_now() - interval '24 hours' - ${SLACK}`,
  },
  {
    table: 'private.reaction_tickets',
    rule: '30 days after expires_at',
    overdue: `expires_at < app_now() - interval '30 days' - ${SLACK}`,
  },
  {
    table: 'actor_mailbox',
    rule: 'delivered or dead messages 1 day after',
    overdue: `coalesce(delivered_at_ms, dead_at_ms) < app_now_ms() - ${DAY_MS + SLACK_MS}`,
  },
  {
    table: 'effects',
    rule: 'completed or dead effects 1 day after finished',
    overdue: `status in ('completed', 'dead') and finished_at_ms < app_now_ms() - ${DAY_MS + SLACK_MS}`,
  },
  {
    // A binding outlives expires_at_ms while its effect runs and one lifetime past the effect's
    // end or its retirement (effect_binding_live, migrations/0010_baseline_effects.sql; docs/effects.md).
    table: 'effect_recoveries r',
    rule: 'one lifetime past the later of emit, end and retirement',
    overdue: `not effect_binding_live(r, app_now_ms() - ${SLACK_MS})`,
  },
  {
    table: 'typing_maintenance_runs',
    rule: '3 days after at',
    overdue: `at < app_now() - interval '3 days' - ${SLACK}`,
  },
  {
    table: 'typing_incidents',
    rule: '2 days after at',
    overdue: `at < app_now() - interval '2 days' - ${SLACK}`,
  },
  {
    table: 'lark_api_errors',
    rule: '30 days after at',
    overdue: `at < app_now() - interval '30 days' - ${SLACK}`,
  },
  {
    table: 'console_audit',
    rule: '90 days after at',
    overdue: `at < app_now() - interval '90 days' - ${SLACK}`,
  },
];

/** The streamed replies' checks (chaos/card-invariants.ts) run with the others. */
Object.assign(INVARIANTS, CARD_INVARIANTS);

export async function checkAll(world: World, model: Model): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  for (const [name, check] of Object.entries(INVARIANTS)) {
    try {
      out.push({ name, ...(await check(world, model)) });
    } catch (err) {
      out.push({ name, violations: [`check failed to run: ${(err as Error).message}`] });
    }
  }
  return out;
}
