import { Deadline } from '../clock';
import { log } from '../log';
import { ledgerClient } from './client';
import { sweepOurTyping } from './remote';
import { type Q, WITHDRAW_BUDGET_MS } from './types';

export interface AnchorInstallation {
  id: string;
  appId: string;
  apiBase: string;
  appSecret: string;
}

/**
 * Delivery-anchor fallback for badges that predate the ledger: when a turn's reply is
 * delivered, sweep its anchor (trigger) message for OUR `Typing` only if the ledger has no
 * row for it. This cannot reconstruct every historical input: coalesced legacy inputs other
 * than the anchor keep their badge until someone removes it.
 */
export async function sweepDeliveryAnchor(
  q: Q,
  installation: AnchorInstallation,
  anchorMessageId: string,
  opts: { deadline?: Deadline; fetch?: typeof fetch } = {},
): Promise<'ledger_owned' | 'cleaned' | 'nothing' | 'failed'> {
  const { rows } = await q.query(
    'select 1 from channel_typing_reaction where installation_id = $1 and source_message_id = $2',
    [installation.id, anchorMessageId],
  );
  if (rows.length > 0) return 'ledger_owned';
  const client = ledgerClient(
    q,
    { baseUrl: installation.apiBase, appId: installation.appId, appSecret: installation.appSecret },
    opts.fetch,
  );
  const r = await sweepOurTyping(
    client,
    anchorMessageId,
    installation.appId,
    opts.deadline ?? new Deadline(WITHDRAW_BUDGET_MS),
  );
  if (r.kind === 'gone') return r.deleted > 0 ? 'cleaned' : 'nothing';
  if (r.kind === 'not_found') return 'nothing';
  log.warn('typing_anchor_sweep_failed', { installationId: installation.id, outcome: r.kind });
  return 'failed';
}
