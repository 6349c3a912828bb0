import type { PoolClient } from '@neondatabase/serverless';

/**
 * The engine's half of the revalidation after a successful Typing Add (the ledger checks its
 * own row: not settled, not terminal, installation present with the same App ID). One
 * statement, a one-shot on the revalidation's own budget (its own snapshot):
 * - the conversation still exists, belongs to the row's installation and is still in the
 *   input's context revision (a context reset ends every older input);
 * - the installation is still registered with the row's App ID, and not paused (an Add whose
 *   registration raced the pause comes off at once: no badge while paused, pause.ts);
 * - the message was not recalled (channel/recall.ts): an Add that raced the recall comes off;
 * - no terminal turn covers the input: turns of a session run one at a time, so any turn of
 *   the input's revision with `cutoff_position >= position` and an outcome means the turn
 *   that consumed this input is over;
 * - no settlement cutoff covers it (written in the same transaction as the turn's outcome,
 *   so this repeats the check above; kept while the settlement table is the ledger's record).
 */
const INPUT_LIVE = `
select exists (
  select 1
    from channel_typing_reaction r
    join channel_conversations c
      on c.id = r.session_id and c.installation_id = r.installation_id
     and c.context_revision = r.context_revision
    join lark_installations i on i.id = r.installation_id and i.app_id = r.app_id
   where r.id = $1 and r.session_id = $2
     and not exists (select 1 from lark_installation_settings p
                      where p.installation_id = r.installation_id and p.paused = 'on')
     and not exists (select 1 from channel_recalled_messages x
                      where x.installation_id = r.installation_id and x.message_id = r.source_message_id)
     and not exists (select 1 from channel_turns t
                      where t.session_id = r.session_id and t.context_revision = r.context_revision
                        and t.cutoff_position >= r.input_position and t.outcome is not null)
     and not exists (select 1 from channel_typing_settlement s
                      where s.session_id = r.session_id and s.context_revision = r.context_revision
                        and s.cutoff_position >= r.input_position)
) as live`;

/** `InputLiveCheck` for the typing ledger: is this exact input still waiting for its turn's end? */
export async function isConversationInputLive(
  q: Pick<PoolClient, 'query'>,
  input: { rowId: string; sessionId: string },
): Promise<boolean> {
  const { rows } = await q.query<{ live: boolean }>(INPUT_LIVE, [input.rowId, input.sessionId]);
  return rows[0]?.live === true;
}
