import type { Pool, PoolClient } from '@neondatabase/serverless';
import { withTx } from '../db/tx';
import { enqueueCtes } from '../effects/mailbox';
import { AppError } from '../errors';
import { type SettingsUpdate, updateSettings } from '../installations/settings';

type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

/**
 * Pausing an installation (issue 33, docs/operations.md "Pause and resume"). A turn starts only
 * in the conversation actor's fenced commit (conversation.ts `startTurn`); that commit takes
 * TURN_START_LOCK, a share lock on the installation's row, and then reads the hold in a
 * statement of its own. A pause takes PAUSE_LOCK on the same row, which waits for every turn
 * start in flight and blocks new ones until the pause commits; they then read `paused` and
 * give way. So once the pause's answer is sent, no turn of the installation can start: a start
 * either committed before the pause took its lock, or it reads the pause.
 *
 * The installation row, not the settings row: an installation nobody configured has no
 * settings row, and a lock on a row that does not exist yet serializes nothing.
 */
export const TURN_START_LOCK = 'select 1 from lark_installations where id = $1 for share';
/** Conflicts with TURN_START_LOCK, not with the foreign-key checks of the webhook's inserts. */
export const PAUSE_LOCK = 'select 1 from lark_installations where id = $1 for no key update';

/** A resume's message to a conversation with a backlog: `resume:<resume id>`. */
export const RESUME_KEY_PREFIX = 'resume:';
export type BacklogChoice = 'answer' | 'drop';
export interface ResumePayload {
  backlog: BacklogChoice;
}

/**
 * Why a turn may not start now: the installation is paused, or a resume left this
 * conversation a message that has not been handled (it decides the backlog first). One
 * statement, one snapshot: a resume commits the flag and its messages together.
 */
const HOLD = `
select coalesce((select paused from lark_installation_settings where installation_id = $1), 'off') = 'on' as paused,
       exists (select 1 from actor_mailbox
                where instance_id = $2 and state = 'pending' and message_key like '${RESUME_KEY_PREFIX}%') as resuming`;

export type Hold = 'paused' | 'resuming' | null;

export async function readHold(q: Q, installationId: string, sessionId: string): Promise<Hold> {
  const { rows } = await q.query<{ paused: boolean; resuming: boolean }>(HOLD, [installationId, sessionId]);
  return rows[0]?.paused ? 'paused' : rows[0]?.resuming ? 'resuming' : null;
}

/**
 * Inside the commit that starts a turn, before its rows: the lock, then the hold read again
 * (its own statement, so it sees a pause that committed while the lock waited). A hold that
 * came up since the handler read it throws `revision_conflict`: the runner handles the event
 * again, and the handler then sees the hold and starts nothing.
 */
export async function claimTurnStart(
  tx: PoolClient,
  installationId: string,
  sessionId: string,
): Promise<void> {
  await tx.query(TURN_START_LOCK, [installationId]);
  const hold = await readHold(tx, installationId, sessionId);
  if (hold)
    throw new AppError('revision_conflict', `turn start refused: installation ${hold}`, { sessionId, hold });
}

const BUDGET_MS = 10_000;

/** Pauses: acknowledged (resolves) only once no turn of the installation can start. Null: no such installation. */
export async function pauseInstallation(
  pool: Pool,
  installationId: string,
  operator: string,
): Promise<SettingsUpdate | null> {
  return withTx(pool, { budgetMs: BUDGET_MS }, async (tx) => {
    const { rowCount } = await tx.query(PAUSE_LOCK, [installationId]);
    if (!rowCount) return null;
    return updateSettings(tx, installationId, { paused: 'on' }, operator);
  });
}

/** Conversations with a resume message per page (one statement each, all in the resume's transaction). */
export const RESUME_PAGE = 1000;

/**
 * The installation's conversations holding a backlog (pending inputs in the actor's state, or
 * an input message not yet handled), after `$2` in id order, one page; each gets the resume's
 * message in the same statement (the mailbox's own SQL, effects/mailbox.ts).
 */
const ENQUEUE_PAGE = `
with backlog as (
  select i.id, i.actor_type, i.actor_key
    from channel_conversations c
    join actor_instances i on i.id = c.id
   where c.installation_id = $1 and c.id > $2
     and (jsonb_array_length(coalesce(i.state -> 'pending', '[]'::jsonb)) > 0
          or exists (select 1 from actor_mailbox m
                      where m.instance_id = i.id and m.state = 'pending' and m.message_key like 'in:%'))
   order by c.id
   limit ${RESUME_PAGE}
), ${enqueueCtes({
  instanceId: 'b.id',
  actorType: 'b.actor_type',
  actorKey: 'b.actor_key',
  state: `'{}'::jsonb`,
  key: `'${RESUME_KEY_PREFIX}' || $3::text`,
  payload: '$4::jsonb',
  from: 'backlog b',
})}
select id from backlog order by id`;

export interface Resumed {
  update: SettingsUpdate;
  /** Conversations that got the resume's message (their hosts are woken, or found by the minute poll). */
  conversations: string[];
}

/**
 * Resumes: `paused` off and, in the same transaction, one resume message to every conversation
 * holding a backlog, which then answers it (its newest turn only) or drops it (conversation.ts).
 * The same transaction: a conversation that sees `paused` off also sees its message, so no
 * turn starts on the backlog before the operator's choice is applied. Resuming an installation
 * that is not paused changes nothing. Null: no such installation.
 */
export async function resumeInstallation(
  pool: Pool,
  installationId: string,
  operator: string,
  backlog: BacklogChoice,
): Promise<Resumed | null> {
  const resumeId = crypto.randomUUID();
  const payload: ResumePayload = { backlog };
  return withTx(pool, { budgetMs: BUDGET_MS }, async (tx) => {
    const { rowCount } = await tx.query(PAUSE_LOCK, [installationId]);
    if (!rowCount) return null;
    const update = await updateSettings(tx, installationId, { paused: 'off' }, operator);
    if (!update || update.changed.length === 0) return update && { update, conversations: [] };
    const conversations: string[] = [];
    for (let after = ''; ; ) {
      const { rows } = await tx.query<{ id: string }>(ENQUEUE_PAGE, [
        installationId,
        after,
        resumeId,
        JSON.stringify(payload),
      ]);
      conversations.push(...rows.map((r) => r.id));
      if (rows.length < RESUME_PAGE) break;
      after = rows[rows.length - 1]!.id;
    }
    return { update, conversations };
  });
}
