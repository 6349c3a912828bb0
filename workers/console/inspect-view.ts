import { html } from 'hono/html';
import type { ConversationMatch, TimelineEntry } from '../channel/inspect';
import { actionForm } from './views';

/**
 * The conversation inspector's page (/console/inspect, docs/operations.md "Conversation
 * inspector"): a search within one installation by chat id, message id or open_id, the conversations it found, and the
 * chosen one's timeline, newest first. A failed turn that can be re-run carries the confirmed,
 * CSRF-guarded `turn-rerun` action (the admin route's function), its uuid filled in.
 */
export function inspectView(p: {
  operator: string;
  csrf: string;
  installation: string;
  q: string;
  matches: ConversationMatch[];
  conversation: ConversationMatch | null;
  timeline: TimelineEntry[];
}) {
  const search = html`<form class="act" method="get" action="/console/inspect" data-testid="inspect-search">
    <label for="installation">Installation</label>
    <input id="installation" name="installation" value="${p.installation}" required maxlength="43" size="26" placeholder="li_…">
    <label for="q">Chat id, message id or open_id</label>
    <input id="q" name="q" value="${p.q}" required maxlength="200" size="40">
    <button type="submit">Find</button></form>`;
  const matches = p.matches.length
    ? html`<table data-testid="inspect-matches"><tr><th>conversation</th><th>installation</th><th>chat</th><th>thread</th><th>found by</th><th>last input</th></tr>
      ${p.matches.map(
        (m) => html`<tr${m.id === p.conversation?.id ? html` class="chosen"` : ''}>
          <td><a href="/console/inspect?installation=${encodeURIComponent(p.installation)}&amp;q=${encodeURIComponent(p.q)}&amp;session=${encodeURIComponent(m.id)}">${m.id}</a></td>
          <td>${m.installation_id}</td><td>${m.chat_id}</td><td>${m.thread_id ?? '—'}</td><td>${m.via}</td>
          <td>${m.updated_at instanceof Date ? m.updated_at.toISOString() : String(m.updated_at)}</td></tr>`,
      )}</table>`
    : p.q
      ? html`<p class="muted" data-testid="inspect-none">No conversation has that chat id, message id or sender.</p>`
      : '';
  // On the turn's settled entry, once: not after a re-run was requested.
  const rerunnable = (e: TimelineEntry) =>
    e.kind === 'turn' && e.detail.rerunnable === true && typeof e.detail.delivery_key === 'string';
  const timeline = p.conversation
    ? html`<h3>Timeline of ${p.conversation.id}</h3>
      <table data-testid="inspect-timeline"><tr><th>at</th><th>what</th><th>summary</th><th>action</th></tr>
      ${p.timeline.map(
        (
          e,
        ) => html`<tr data-kind="${e.kind}"><td>${e.at ? e.at.replace('T', ' ').slice(0, 23) : '—'}</td><td>${e.kind}</td><td>${e.summary}</td>
          <td>${
            rerunnable(e) && p.conversation
              ? actionForm(p.csrf, 'turn-rerun', 'Re-run', {
                  installation: p.conversation.installation_id,
                  turn: String(e.detail.delivery_key),
                })
              : ''
          }</td></tr>`,
      )}</table>`
    : '';
  return html`<header><h1>Conversation inspector</h1><span>signed in as <b>${p.operator}</b></span>
    <a href="/console">Back to the console</a></header>
    <main><section class="panel" id="panel-inspect"><h2>Find a conversation</h2>${search}${matches}${timeline}</section></main>`;
}
