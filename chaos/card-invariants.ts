import { cardIdOf } from '../emulator/cardkit-api';
import { type CardView, listCards } from '../test/helpers/lark-cards';
import { CARD_ELEMENT_ID } from '../workers/channel/card-stream';
import { notice } from '../workers/channel/notices';
import type { CheckResult } from './invariants';
import type { Installation, Model } from './workload';
import type { World } from './world';

/**
 * The streamed replies' invariants (issue 34), read after the quiesce from the emulator's cards
 * (`GET /__emulator/cards?app_id=`) and the schedule's database (`chaos.turns` and
 * `chaos.reply_cards`, the audit's copies of `channel_turns` and `channel_reply_cards`, which
 * housekeeping prunes). A card of a deleted installation is exempt where the check needs the
 * service to reach it again: its credentials went with it.
 */
type Check = (world: World, model: Model) => Promise<Omit<CheckResult, 'name'>>;

interface TurnRow {
  session_id: string;
  turn_no: number;
  anchor_message_id: string;
  delivery_key: string;
  outcome: string | null;
  reply_message_id: string | null;
}

interface CardRow {
  session_id: string;
  turn_no: number;
  installation_id: string;
  card_id: string;
  sequence: number;
  sent_message_id: string | null;
}

/** The interrupted notice in every language the service speaks (notices.ts). */
const INTERRUPTED = new Set((['en', 'vi', 'zh'] as const).map((l) => notice('interrupted', l)));

interface CardWorld {
  turns: TurnRow[];
  /** The recorded card of each turn, by card id. */
  recorded: Map<string, CardRow>;
  /** Every card of the schedule's apps at the emulator, with its installation. */
  cards: { view: CardView; inst: Installation }[];
}

async function read(world: World, model: Model): Promise<CardWorld> {
  const turns = (
    await world.db.query<TurnRow>(
      `select session_id, turn_no, anchor_message_id, delivery_key, outcome, reply_message_id from chaos.turns`,
    )
  ).rows;
  const recorded = new Map(
    (
      await world.db.query<CardRow>(
        `select session_id, turn_no, installation_id, card_id, sequence, sent_message_id from chaos.reply_cards`,
      )
    ).rows.map((r) => [r.card_id, r]),
  );
  const cards: CardWorld['cards'] = [];
  for (const inst of model.installations)
    for (const view of await listCards(world.lark.url, { app_id: inst.app.app_id }))
      cards.push({ view, inst });
  return { turns, recorded, cards };
}

const turnKey = (t: { session_id: string; turn_no: number }) => `${t.session_id}#${t.turn_no}`;

export const CARD_INVARIANTS: Record<string, Check> = {
  /**
   * Exactly one visible reply per delivered turn, and it is the turn's card when one was sent:
   * the app's messages answering the anchor with the turn's uuid are one, the one the turn
   * recorded (never a card and a text, never two messages). Every sent card is the recorded
   * card of a turn (a created card no writer recorded is never sent), and is in one message.
   */
  async 'cards.one_reply_per_delivered_turn'(world, model) {
    const { turns, recorded, cards } = await read(world, model);
    const violations: string[] = [];
    // The app's replies by anchor: a turn whose anchor no other turn shares owns all of them,
    // whatever their uuid (a second reply under another uuid is still a second reply).
    const replies = new Map<string, { id: string; uuid?: string; cardId?: string }[]>();
    const messagesOfCard = new Map<string, number>();
    for (const m of world.lark.state.messages.values()) {
      if (!m.parent_id || m.sender.sender_type !== 'app') continue;
      const cardId = cardIdOf(m.msg_type, m.content);
      const list = replies.get(m.parent_id) ?? replies.set(m.parent_id, []).get(m.parent_id)!;
      list.push({ id: m.message_id, uuid: m.reply_uuid, cardId });
      if (cardId) messagesOfCard.set(cardId, (messagesOfCard.get(cardId) ?? 0) + 1);
    }
    const turnsAt = new Map<string, number>();
    for (const t of turns) turnsAt.set(t.anchor_message_id, (turnsAt.get(t.anchor_message_id) ?? 0) + 1);
    const cardOfTurn = new Map([...recorded.values()].map((c) => [turnKey(c), c]));
    for (const t of turns) {
      if (t.outcome !== 'delivered') continue;
      const onAnchor = replies.get(t.anchor_message_id) ?? [];
      const sent =
        turnsAt.get(t.anchor_message_id) === 1 ? onAnchor : onAnchor.filter((r) => r.uuid === t.delivery_key);
      const card = cardOfTurn.get(turnKey(t));
      const what = `turn ${turnKey(t)}`;
      if (sent.length !== 1)
        violations.push(
          `${what} delivered with ${sent.length} visible replies (${sent.map((r) => (r.cardId ? `card ${r.cardId}` : `text ${r.id}`)).join(', ')})`,
        );
      else if (sent[0]!.id !== t.reply_message_id)
        violations.push(`${what} recorded reply ${t.reply_message_id}, Lark shows ${sent[0]!.id}`);
      if (card?.sent_message_id && !sent.some((r) => r.cardId === card.card_id))
        violations.push(`${what} sent card ${card.card_id}, but its reply is not that card`);
    }
    for (const { view } of cards) {
      if (!view.sent) continue;
      if (!recorded.has(view.card_id))
        violations.push(`card ${view.card_id} sent as ${view.sent.message_id} but recorded for no turn`);
      const n = messagesOfCard.get(view.card_id) ?? 0;
      if (n > 1) violations.push(`card ${view.card_id} sent in ${n} messages`);
    }
    return { violations };
  },

  /** Every sent card finished (streaming off) once the world is quiet: no "generating…" left. */
  async 'cards.every_sent_card_finished'(world, model) {
    const { cards } = await read(world, model);
    const violations: string[] = [];
    let exempt = 0;
    const now = world.lark.state.now();
    for (const { view, inst } of cards) {
      if (!view.sent || view.finished) continue;
      // Deleted: nothing can reach the card again. Expired: Lark takes no update past the card's
      // 14-day lifetime, which a schedule's clock jumps (91 days) can pass mid-turn.
      if (inst.deleted || now >= view.expires_at) {
        exempt++;
        continue;
      }
      violations.push(
        `card ${view.card_id} (message ${view.sent.message_id}) still streaming; sequences ${view.sequences.map((s) => `${s.route}:${s.sequence}`).join(' ')}; refused ${view.refused.map((r) => `${r.route}:${r.sequence ?? '-'}:${r.code}`).join(' ')}`,
      );
    }
    return { violations, exempt };
  },

  /**
   * Each card's accepted sequences strictly increase, and across every writer no sequence is
   * sent twice and none above what was reserved in Postgres (`channel_reply_cards.sequence`):
   * sequences come from the durable reservations, never from a writer's memory.
   */
  async 'cards.sequences_strictly_increasing'(world, model) {
    const { recorded, cards } = await read(world, model);
    const violations: string[] = [];
    for (const { view } of cards) {
      const accepted = view.sequences.map((s) => s.sequence);
      for (let i = 1; i < accepted.length; i++)
        if (accepted[i]! <= accepted[i - 1]!) {
          violations.push(`card ${view.card_id} accepted ${accepted[i]} after ${accepted[i - 1]}`);
          break;
        }
      const used = [
        ...accepted,
        ...view.refused.flatMap((r) => (r.sequence === undefined ? [] : [r.sequence])),
        ...view.ignored.flatMap((r) => (r.sequence === undefined ? [] : [r.sequence])),
      ];
      const twice = [...new Set(used.filter((s, i) => used.indexOf(s) !== i))];
      if (twice.length > 0)
        violations.push(`card ${view.card_id}: sequence(s) ${twice.join(', ')} sent twice`);
      const reserved = recorded.get(view.card_id)?.sequence ?? 0;
      const above = used.filter((s) => s > reserved);
      if (above.length > 0)
        violations.push(
          `card ${view.card_id}: sequence(s) ${above.join(', ')} above the ${reserved} reserved`,
        );
    }
    return { violations };
  },

  /**
   * No card shows an answer for a turn that has none: a sent card whose turn did not end
   * `delivered` was finished with the interrupted notice (card-reply.ts finishInterruptedCard).
   */
  async 'cards.undelivered_turn_shows_notice'(world, model) {
    const { turns, recorded, cards } = await read(world, model);
    const violations: string[] = [];
    let exempt = 0;
    const outcome = new Map(turns.map((t) => [turnKey(t), t.outcome]));
    for (const { view, inst } of cards) {
      if (!view.sent) continue;
      const row = recorded.get(view.card_id);
      // An unrecorded sent card is cards.one_reply_per_delivered_turn's finding.
      if (!row) continue;
      const o = outcome.get(turnKey(row)) ?? null;
      if (o === 'delivered') continue;
      const text = view.elements[CARD_ELEMENT_ID]?.text ?? null;
      if (view.finished && text !== null && INTERRUPTED.has(text)) continue;
      if (inst.deleted || world.lark.state.now() >= view.expires_at) {
        exempt++;
        continue;
      }
      violations.push(
        `card ${view.card_id} of turn ${turnKey(row)} (outcome ${o ?? 'open'}) shows ${JSON.stringify(text?.slice(0, 60))}${view.finished ? '' : ', streaming'}`,
      );
    }
    return { violations, exempt };
  },
};
