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
  | { kind: 'skipped'; reason: 'stale_message' | 'quota_full' | 'contended' | 'already_settled' };

/**
 * One statement: refuse when a settlement already covers this input (a taskless settlement
 * can precede the registration), pick a random free quota slot, insert with `on conflict do
 * nothing`. The unique partial index on (workspace_id, quota_slot) arbitrates concurrent
 * registrations: a loser waits for the winner's commit and then inserts nothing. The same
 * `do nothing` covers a message registered twice (unique per installation and message).
 */
const REGISTER = `
with settled as (
  select 1 from channel_typing_settlement
  where session_id = $5 and context_revision = $8 and cutoff_position >= $7 limit 1
), free as (
  select s from generate_series(1, ${QUOTA_SLOTS}) s
  where not exists (select 1 from channel_typing_reaction r
                    where r.workspace_id = $2 and r.quota_slot = s)
  order by random() limit 1
), ins as (
  insert into channel_typing_reaction
    (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
     context_revision, chat_id, message_created_at, credential_snapshot, quota_slot, expires_at)
  select $1, $2, $3, $4, $5, $6, $7, $8, $9,
         case when $10::bigint is null then null else to_timestamp($10::bigint / 1000.0) end,
         $11, free.s, app_now() + $12 * interval '1 millisecond'
  from free
  where not exists (select 1 from settled)
  on conflict do nothing
  returning id
)
select exists (select 1 from ins) as inserted,
       exists (select 1 from settled) as settled,
       exists (select 1 from free) as has_free`;

/**
 * Registers one input BEFORE any Add, inside the caller's transaction (`tx`). If this throws
 * or the transaction rolls back, no Add may be sent: the caller gets the registration only
 * from a committed transaction. Never blocks the input: every skip is a warning.
 */
export async function registerInput(tx: Q, keys: KeyRing, input: RegisterInput): Promise<Registration> {
  const inst = input.installation;
  if (input.messageCreatedAtMs != null && input.receivedAtMs - input.messageCreatedAtMs > STALE_MESSAGE_MS)
    return { kind: 'skipped', reason: 'stale_message' };
  const id = newRowId();
  const sealed = await sealSnapshot(keys, id, {
    appId: inst.appId,
    appSecret: inst.appSecret,
    apiBase: inst.apiBase,
  });
  const { rows } = await tx.query<{ inserted: boolean; settled: boolean; has_free: boolean }>(REGISTER, [
    id,
    inst.workspaceId,
    inst.id,
    inst.appId,
    input.sessionId,
    input.messageId,
    String(input.inputPosition),
    String(input.contextRevision),
    input.chatId ?? null,
    input.messageCreatedAtMs ?? null,
    sealed,
    MAX_LIFETIME_MS,
  ]);
  const r = rows[0]!;
  if (r.inserted) return { kind: 'registered', id, messageId: input.messageId, installation: inst };
  if (r.settled) return { kind: 'skipped', reason: 'already_settled' };
  const reason = r.has_free ? 'contended' : 'quota_full';
  // Spec: repeated quota skips are a capacity incident; never a credential in this line.
  log.warn('typing_add_skipped', { workspaceId: inst.workspaceId, installationId: inst.id, reason });
  return { kind: 'skipped', reason };
}
