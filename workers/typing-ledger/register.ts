import type { KeyRing } from '../crypto/sealed';
import { log } from '../log';
import { newRowId, sealSnapshot } from './snapshot';
import { MAX_LIFETIME_MS, type Q, QUOTA_SLOTS, STALE_MESSAGE_MS } from './types';

/** The installation fields a registration seals into the row's snapshot. */
export interface RegisteringInstallation {
  id: string;
  workspaceId: string;
  appId: string;
  apiBase: string;
  appSecret: string;
}

export interface RegisterInput {
  installation: RegisteringInstallation;
  sessionId: string;
  messageId: string;
  chatId?: string | null;
  inputPosition: number | bigint;
  contextRevision: number | bigint;
  /** Lark's message create_time (ms); a message older than two minutes on arrival gets no Add. */
  messageCreatedAtMs?: number | null;
  receivedAtMs: number;
}

/**
 * `registered`: the row is in the webhook's transaction; send the Add only after commit.
 * Anything else: no Add (the input itself is never blocked).
 */
export type Registration =
  | { kind: 'registered'; id: string; messageId: string; installation: RegisteringInstallation }
  | { kind: 'skipped'; reason: 'stale_message' | 'quota_full' | 'contended' };

/** SQL expressions (parameters or columns of an earlier CTE) a registration is built from. */
export interface RegisterSql {
  id: string;
  workspaceId: string;
  installationId: string;
  appId: string;
  sessionId: string;
  messageId: string;
  position: string;
  revision: string;
  chatId: string;
  createdAtMs: string;
  sealed: string;
  lifetimeMs: string;
  /** Extra FROM item the expressions read (e.g. the recorded input's CTE), or null. */
  from: string | null;
  /** Boolean SQL: register at all (false for a stale message). */
  gate: string;
}

/**
 * The registration as CTEs (`typing_free`, `typing_ins`) so the webhook can put it in the
 * same statement as the input it belongs to: pick a random free quota slot, insert with
 * `on conflict do nothing`. No settlement cutoff is checked: the same statement numbers the
 * input, and a turn only covers inputs whose statement has committed, so no settlement can
 * precede a registration (the spec's taskless settlement after a failed flush cannot happen
 * here: typing-ledger/settle.ts). The unique partial index on
 * (workspace_id, quota_slot) arbitrates concurrent registrations: a loser waits for the
 * winner's commit and then inserts nothing. The same `do nothing` covers a message
 * registered twice (unique per installation and message). Read the outcome with
 * REGISTER_RESULT_COLUMNS. A quota skip (no free slot) also appends a `typing_incidents`
 * row (`quota_skip`) in the same statement (migration 0090: the console's "quota skips, last 24 h").
 */
export function registerCtes(x: RegisterSql): string {
  const from = x.from ? `, ${x.from}` : '';
  return `typing_free as (
  select s from generate_series(1, ${QUOTA_SLOTS}) s
  where ${x.gate} and not exists (select 1 from channel_typing_reaction r
                                  where r.workspace_id = ${x.workspaceId} and r.quota_slot = s)
  order by random() limit 1
), typing_ins as (
  insert into channel_typing_reaction
    (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
     context_revision, chat_id, message_created_at, credential_snapshot, quota_slot, expires_at)
  select ${x.id}, ${x.workspaceId}, ${x.installationId}, ${x.appId}, ${x.sessionId}, ${x.messageId},
         ${x.position}, ${x.revision}, ${x.chatId},
         case when ${x.createdAtMs}::bigint is null then null else to_timestamp(${x.createdAtMs}::bigint / 1000.0) end,
         ${x.sealed}, typing_free.s, app_now() + ${x.lifetimeMs} * interval '1 millisecond'
  from typing_free${from}
  on conflict do nothing
  returning id
), typing_quota_skip as (
  insert into typing_incidents (workspace_id, kind)
  select ${x.workspaceId}, 'quota_skip' from ${x.from ?? '(select 1) as one'}
  where ${x.gate} and not exists (select 1 from typing_free)
)`;
}

export const REGISTER_RESULT_COLUMNS = `exists (select 1 from typing_ins) as typing_inserted,
       exists (select 1 from typing_free) as typing_has_free`;

export interface RegisterResultRow {
  typing_inserted: boolean;
  typing_has_free: boolean;
}

const REGISTER = `
with ${registerCtes({
  id: '$1',
  workspaceId: '$2',
  installationId: '$3',
  appId: '$4',
  sessionId: '$5',
  messageId: '$6',
  position: '$7::bigint',
  revision: '$8::bigint',
  chatId: '$9',
  createdAtMs: '$10',
  sealed: '$11',
  lifetimeMs: '$12',
  from: null,
  gate: 'true',
})}
select ${REGISTER_RESULT_COLUMNS}`;

/** Before the statement: the stale-message rule, the client-generated row id and its sealed snapshot. */
export async function prepareRegistration(
  keys: KeyRing,
  input: Pick<RegisterInput, 'installation' | 'messageCreatedAtMs' | 'receivedAtMs'>,
): Promise<{ stale: true } | { stale: false; id: string; sealed: string }> {
  if (input.messageCreatedAtMs != null && input.receivedAtMs - input.messageCreatedAtMs > STALE_MESSAGE_MS)
    return { stale: true };
  const inst = input.installation;
  const id = newRowId();
  const sealed = await sealSnapshot(keys, id, {
    appId: inst.appId,
    appSecret: inst.appSecret,
    apiBase: inst.apiBase,
  });
  return { stale: false, id, sealed };
}

/** After the statement: what it decided. Every skip is a warning. */
export function registrationOutcome(
  r: RegisterResultRow,
  id: string,
  messageId: string,
  inst: RegisteringInstallation,
): Registration {
  if (r.typing_inserted) return { kind: 'registered', id, messageId, installation: inst };
  const reason = r.typing_has_free ? 'contended' : 'quota_full';
  // Spec: repeated quota skips are a capacity incident; never a credential in this line.
  log.warn('typing_add_skipped', { workspaceId: inst.workspaceId, installationId: inst.id, reason });
  return { kind: 'skipped', reason };
}

/**
 * Registers one input BEFORE any Add, inside the caller's transaction (`tx`). If this throws
 * or the transaction rolls back, no Add may be sent: the caller gets the registration only
 * from a committed transaction. Never blocks the input: every skip is a warning.
 */
export async function registerInput(tx: Q, keys: KeyRing, input: RegisterInput): Promise<Registration> {
  const inst = input.installation;
  const prep = await prepareRegistration(keys, input);
  if (prep.stale) return { kind: 'skipped', reason: 'stale_message' };
  const { rows } = await tx.query<RegisterResultRow>(REGISTER, [
    prep.id,
    inst.workspaceId,
    inst.id,
    inst.appId,
    input.sessionId,
    input.messageId,
    String(input.inputPosition),
    String(input.contextRevision),
    input.chatId ?? null,
    input.messageCreatedAtMs ?? null,
    prep.sealed,
    MAX_LIFETIME_MS,
  ]);
  return registrationOutcome(rows[0]!, prep.id, input.messageId, inst);
}
