import { html } from 'hono/html';
import type { BulkPreview, BulkResult } from '../effects/dead-letters-bulk';
import { CHANGEABLE_SETTING_NAMES, SETTING_NAMES } from '../installations/settings';
import { bars } from './charts';
import type { ConsoleData } from './data';

type Row = Record<string, unknown>;

function when(v: unknown): string {
  if (v === null || v === undefined) return '—';
  const d = v instanceof Date ? v : new Date(typeof v === 'number' ? v : String(v));
  return Number.isNaN(d.getTime()) ? '—' : d.toISOString().replace('T', ' ').slice(0, 19);
}

const num = (v: unknown) => html`<td class="num">${v === null || v === undefined ? '—' : String(v)}</td>`;
const badge = (text: string, tone: 'ok' | 'warn' | 'bad' | '' = '') =>
  html`<span class="badge ${tone}">${text}</span>`;
const unavailable = html`<p class="err">unavailable (see the logs: console_read_failed)</p>`;

/** A confirmed action: a POST with the session's CSRF token and a required confirmation box. */
export function actionForm(
  csrf: string,
  name: string,
  label: string,
  fields: Record<string, string> = {},
  extra: unknown = '',
) {
  return html`<form class="act" method="post" action="/console/actions/${name}" data-action="${name}">
    <input type="hidden" name="csrf" value="${csrf}">
    ${Object.entries(fields).map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}">`)}
    ${extra}
    <label><input type="checkbox" name="confirm" value="yes" required> confirm</label>
    <button type="submit">${label}</button></form>`;
}

export function loginView(error: string | null) {
  return html`<form class="login" method="post" action="/console/login">
    <h2>reaction-ledger console</h2>
    ${error ? html`<p class="err" data-code="${error}">${error === 'unauthorized' ? 'Wrong admin token.' : 'Name the operator (1–200 printable characters).'}</p>` : ''}
    <label for="operator">Operator (recorded with every action)</label>
    <input id="operator" name="operator" autocomplete="username" required maxlength="200">
    <label for="token">Admin token</label>
    <input id="token" name="token" type="password" autocomplete="current-password" required>
    <p><button type="submit">Sign in</button></p></form>`;
}

export function errorView(status: number, code: string, message: string) {
  return html`<div class="login"><h2>${status}</h2><p class="err" data-code="${code}">${code}: ${message}</p>
    <p><a href="/console">Back to the console</a></p></div>`;
}

function typingPanel(d: ConsoleData, csrf: string, abandoned: Row[]) {
  const m = d.maintenance;
  const state = m ? (m.enabled ? badge('enabled', 'ok') : badge('stopped', 'bad')) : badge('unknown', 'warn');
  const runs = d.typing?.runs ?? [];
  return html`<section class="panel" id="panel-typing"><h2>Typing badges</h2>
    <p>Maintenance: <span data-testid="typing-state">${state}</span>
      ${m ? html`stop generation <b>${m.stopGeneration}</b>, last run ${when(m.lastRunAt)}${m.running ? ', running' : ''}` : ''}</p>
    ${
      m?.enabled === false
        ? actionForm(csrf, 'typing-enable', 'Enable maintenance')
        : actionForm(csrf, 'typing-stop', 'Stop maintenance')
    }
    ${
      d.typing
        ? html`<table><tr><th>workspace</th><th class="num">pending</th><th class="num">overdue redaction</th>
      <th class="num">abandoned</th><th>oldest pending</th><th class="num">quota use / 1,000</th>
      <th class="num">quota skips 24 h</th><th class="num">failed withdrawals 24 h</th></tr>
      ${d.typing.workspaces.map(
        (w) => html`<tr><td>${w.workspace_id}</td>${num(w.pending)}
        <td class="num">${w.overdue_redaction > 0 ? badge(String(w.overdue_redaction), 'bad') : '0'}</td>
        <td class="num">${w.abandoned > 0 ? badge(String(w.abandoned), 'warn') : '0'}</td><td>${when(w.oldest_pending)}</td>
        <td class="num">${w.quota_used}${w.quota_used >= 900 ? html` ${badge('near full', 'bad')}` : ''}</td>
        ${num(w.quota_skips_24h)}${num(w.withdraw_failed_24h)}</tr>`,
      )}
      </table>
      <h3>Last maintenance passes</h3>
      <div class="charts"><figure>${bars(runs.map((r) => Number(r.duration_ms)).reverse(), { label: 'duration of the last passes (ms) against the budget', limit: Number(runs[0]?.budget_ms ?? 0) })}
        <figcaption>duration against budget (dashed), oldest → newest</figcaption></figure></div>
      <table><tr><th>time</th><th class="num">expired</th><th class="num">pruned</th><th class="num">claimed</th>
        <th class="num">cleaned</th><th class="num">deferred</th><th class="num">duration / budget ms</th><th></th></tr>
        ${runs.slice(0, 8).map(
          (r) => html`<tr><td>${when(r.at)}</td>${num(r.expired)}${num(r.pruned)}${num(r.claimed)}
          ${num(r.cleaned)}${num(r.deferred)}<td class="num">${r.duration_ms} / ${r.budget_ms}</td>
          <td>${r.stopped ? badge('stopped', 'warn') : ''}${Number(r.failed_steps) > 0 ? badge(`${r.failed_steps} step(s) failed`, 'bad') : ''}</td></tr>`,
        )}
      </table>
      <h3>Abandoned badges (retry the removal)</h3>
      ${
        abandoned.length === 0
          ? html`<p class="muted">none</p>`
          : html`<table><tr><th>row</th><th>workspace</th><th>abandoned</th><th>last removal</th><th></th></tr>
        ${abandoned.map(
          (r) => html`<tr><td>${r.id}</td><td>${r.workspace_id}</td><td>${when(r.abandoned_at)}</td>
          <td>${r.manual_removal_outcome ?? '—'}</td><td>${actionForm(csrf, 'badge-remove', 'Retry removal', { row: String(r.id) })}</td></tr>`,
        )}</table>`
      }`
        : unavailable
    }
  </section>`;
}

function effectsPanel(d: ConsoleData, csrf: string) {
  const e = d.effects;
  if (!e) return html`<section class="panel" id="panel-effects"><h2>Effects</h2>${unavailable}</section>`;
  return html`<section class="panel" id="panel-effects"><h2>Effects</h2>
    <p>effects: ${Object.entries(e.byState).map(([k, v]) => html`${k} <b>${v}</b> · `)} mailbox pending <b>${e.backlog.mailbox_pending}</b>, dead-lettered <b>${e.deadLetters.length}</b>${e.backlog.dead_recovery_callbacks ? html` (recovery callbacks ${badge(String(e.backlog.dead_recovery_callbacks), 'bad')})` : ''} ·
      stale owners ${e.staleOwners > 0 ? badge(String(e.staleOwners), 'bad') : html`<b>0</b>`}</p>
    <div class="charts">
      <figure>${bars(e.trends.dead!, { label: 'dead-lettered messages per hour, last 24 h' })}<figcaption>dead letters / hour (24 h)</figcaption></figure>
      <figure>${bars(e.trends.retired!, { label: 'retirements per hour, last 24 h' })}<figcaption>retirements / hour (24 h)</figcaption></figure>
    </div>
    <h3>Processes (${e.backlog.live_processes} live, ${e.backlog.stale_processes} stale)</h3>
    <table><tr><th>id</th><th>role</th><th>protocol</th><th>started</th><th>last heartbeat</th><th></th></tr>
      ${e.processes.map(
        (
          p,
        ) => html`<tr><td>${p.id}</td><td>${p.role}</td><td>${p.protocol_version}</td><td>${when(p.started_at_ms)}</td>
        <td>${when(p.heartbeat_at_ms)}</td><td>${p.live ? badge('live', 'ok') : badge('stale', 'warn')}</td></tr>`,
      )}</table>
    <h3>Dead-lettered messages</h3>
    ${
      e.deadLetters.length === 0
        ? html`<p class="muted">none</p>`
        : html`<table><tr><th>id</th><th>actor</th><th>key</th><th class="num">attempts</th><th>error</th><th>dead at</th><th></th></tr>
      ${e.deadLetters.map(
        (
          m,
        ) => html`<tr><td>${m.id}</td><td>${m.actor_type}</td><td>${m.message_key}${m.recovery_callback ? html` ${badge('recovery callback', 'bad')}` : ''}</td>${num(m.attempts)}
        <td>${m.last_error ?? ''}</td><td>${when(m.dead_at_ms)}</td>
        <td>${actionForm(csrf, 'dead-requeue', 'Requeue', { message: String(m.id) })}${actionForm(csrf, 'dead-discard', 'Discard', { message: String(m.id) })}</td></tr>`,
      )}</table>`
    }
    ${bulkForm(csrf)}
  </section>`;
}

/** The form that previews dead letters in bulk (by installation and the time they died). */
function bulkForm(csrf: string) {
  return html`<h3>Dead letters in bulk</h3>
    <p class="muted">By installation and the time the message died (ISO 8601, e.g. 2026-12-02T14:00:00Z; empty: from the start, up to now). The preview counts and changes nothing.</p>
    ${actionForm(
      csrf,
      'dead-bulk-preview',
      'Preview',
      {},
      html`<input name="installation" required maxlength="60" size="18" placeholder="li_…">
      <input name="from" maxlength="40" size="22" placeholder="from (dead at)">
      <input name="to" maxlength="40" size="22" placeholder="to (dead at)">`,
    )}`;
}

const bulkRange = (r: { installation: string; from: string; to: string }) =>
  html`installation <b>${r.installation}</b>, dead from <b>${r.from}</b> to <b>${r.to}</b>`;

/** The forms that act on one page of a previewed range (its cursor), each confirmed. */
function bulkPageForms(csrf: string, r: { installation: string; from: string; to: string }, cursor: string) {
  const fields = { installation: r.installation, from: r.from, to: r.to, cursor };
  return html`${actionForm(csrf, 'dead-bulk-requeue', 'Requeue this page', fields)}
    ${actionForm(csrf, 'dead-bulk-discard', 'Discard this page', fields)}`;
}

/** A bulk preview: the count and the first page, then the confirmed actions on that page. */
export function bulkPreviewView(p: BulkPreview, csrf: string) {
  return html`<main><section class="panel" id="panel-bulk"><h2>Dead letters in bulk: preview</h2>
    <p>${bulkRange(p)}: <b data-testid="bulk-count">${p.count}${p.countCapped ? '+' : ''}</b> dead-lettered message(s); nothing was changed.</p>
    ${
      p.cursor
        ? html`<p>First page: ${p.ids.length} message(s) (${p.ids.slice(0, 20).join(', ')}${p.ids.length > 20 ? ', …' : ''}).</p>
      ${bulkPageForms(csrf, p, p.cursor)}`
        : html`<p class="muted">nothing to act on</p>`
    }
    <p><a href="/console#panel-effects">Back to the console</a></p></section></main>`;
}

/** A page done: what it changed, and the next page's forms while there is one. */
export function bulkResultView(r: BulkResult, csrf: string) {
  const verb = r.action === 'requeue' ? 'requeued' : 'discarded';
  return html`<main><section class="panel" id="panel-bulk"><h2>Dead letters in bulk: ${verb}</h2>
    <p>${bulkRange(r)}: <b data-testid="bulk-changed">${r.changed}</b> message(s) ${verb} on this page.</p>
    ${r.next ? html`<p>Next page:</p>${bulkPageForms(csrf, r, r.next)}` : html`<p class="muted">no page follows</p>`}
    <p><a href="/console#panel-effects">Back to the console</a></p></section></main>`;
}

/** Routes held by a recorded 429 reset: nothing is sent on them before `until`. */
function holds(v: unknown) {
  const list = (Array.isArray(v) ? v : []) as { route: string; until: string }[];
  if (list.length === 0) return '—';
  return list.map((h) => html`${badge(h.route, 'warn')} until ${when(h.until)} `);
}

/** An installation's settings (docs/operations.md "Installation settings"), and the form that changes one. */
function settingsCell(csrf: string, i: Row) {
  const settings = (i.settings ?? {}) as Record<string, unknown>;
  const list = SETTING_NAMES.map(
    (n) => html`<span data-setting="${n}">${n} <b>${String(settings[n])}</b></span><br>`,
  );
  const select = html`<select name="setting" required>${CHANGEABLE_SETTING_NAMES.map((n) => html`<option value="${n}">${n}</option>`)}</select>
    <input name="value" required maxlength="20" size="8" placeholder="value">`;
  const installation = { installation: String(i.id) };
  // Pause and resume (docs/operations.md "Pause and resume"): the one the state allows.
  const hold =
    settings.paused === 'on'
      ? actionForm(
          csrf,
          'installation-resume',
          'Resume',
          installation,
          html`<select name="backlog" required><option value="answer">answer backlog</option><option value="drop">drop backlog</option></select>`,
        )
      : actionForm(csrf, 'installation-pause', 'Pause', installation);
  const rerun = actionForm(
    csrf,
    'turn-rerun',
    'Re-run turn',
    installation,
    html`<input name="turn" required maxlength="36" size="36" placeholder="failed turn's reply uuid">`,
  );
  return html`${list}${actionForm(csrf, 'settings-update', 'Change', installation, select)}${hold}${rerun}`;
}

function larkPanel(d: ConsoleData, csrf: string) {
  return html`<section class="panel" id="panel-lark"><h2>Lark installations</h2>
    ${
      d.installations
        ? html`<table><tr><th>installation</th><th>workspace</th><th>app</th><th>API host</th><th>last event (24 h)</th><th>last Open API error</th><th>held by a Lark 429</th><th class="num">Lark calls today (UTC)</th><th>settings</th></tr>
      ${d.installations.map(
        (
          i,
        ) => html`<tr><td>${i.id}</td><td>${i.workspace_id}</td><td>${i.app_id}</td><td>${i.api_base}</td><td>${when(i.last_event_at)}</td>
        <td>${i.error_at ? html`${badge(`code ${i.error_code} (HTTP ${i.error_http_status})`, 'bad')} ${i.error_route} at ${when(i.error_at)}` : badge('none', 'ok')}</td>
        <td>${holds(i.holds)}</td>${num(i.calls_today)}<td>${settingsCell(csrf, i)}</td></tr>`,
      )}</table>`
        : unavailable
    }
  </section>`;
}

function retentionPanel(d: ConsoleData, csrf: string) {
  const r = d.retention;
  if (!r)
    return html`<section class="panel" id="panel-retention"><h2>Retention cleanup</h2>${unavailable}</section>`;
  const hist = r.history ?? [];
  const generation = String(r.control?.generation ?? r.stopGeneration);
  return html`<section class="panel" id="panel-retention"><h2>Retention cleanup</h2>
    <p><span data-testid="retention-state">${r.enabled ? badge('enabled', 'ok') : badge('stopped', 'bad')}</span>
      stop generation <b>${r.stopGeneration}</b> (database ${r.control?.generation ?? '—'}) · cursor ${r.cursor ? `${r.cursor.table} @ ${r.cursor.createdAt}` : '—'}
      · last hourly tick ${when(r.lastCronAt)}${r.running ? ' · running' : ''}</p>
    <p>Budgets used today (${r.budgets.day || '—'}): database batches <b>${r.budgets.dbBatches.used}</b> / ${r.budgets.dbBatches.limit},
      Worker operations <b>${r.budgets.workerOps.used}</b> / ${r.budgets.workerOps.limit}</p>
    ${
      r.enabled
        ? actionForm(csrf, 'retention-stop', 'Stop cleanup')
        : actionForm(
            csrf,
            'retention-enable',
            'Enable cleanup',
            { generation },
            html`<input type="password" name="retention_token" placeholder="RETENTION_ADMIN_TOKEN" autocomplete="off" required>`,
          )
    }
    <div class="charts"><figure>${bars(hist.map((h) => Number(h.rowsDeleted ?? 0)).reverse(), { label: 'rows deleted per run' })}<figcaption>deleted per run, oldest → newest</figcaption></figure></div>
    <table><tr><th>scheduled</th><th>outcome</th><th class="num">selected</th><th class="num">deleted</th><th class="num">batches</th><th class="num">ms</th><th>oldest eligible</th></tr>
      ${hist.slice(0, 10).map((h) => html`<tr><td>${when(h.scheduledTime)}</td><td>${h.outcome}</td>${num(h.rowsSelected)}${num(h.rowsDeleted)}${num(h.batches)}${num(h.durationMs)}<td>${h.oldestEligibleAgeMs == null ? '—' : `${Math.round(Number(h.oldestEligibleAgeMs) / 3_600_000)} h`}</td></tr>`)}
    </table></section>`;
}

function ticketsPanel(d: ConsoleData) {
  const t = d.tickets;
  if (!t)
    return html`<section class="panel" id="panel-tickets"><h2>Mobile tickets</h2>${unavailable}</section>`;
  const sum = (k: string) => (t.trends[k] ?? []).reduce((a, b) => a + b, 0);
  return html`<section class="panel" id="panel-tickets"><h2>Mobile tickets</h2>
    <p>Last 24 h: issued <b data-testid="tickets-issued">${sum('issued')}</b>, expired <b>${sum('expired')}</b>, terminal answers <b>${sum('answered')}</b></p>
    <div class="charts">
      <figure>${bars(t.trends.issued!, { label: 'tickets issued per hour' })}<figcaption>issued / hour</figcaption></figure>
      <figure>${bars(t.trends.expired!, { label: 'tickets expired per hour' })}<figcaption>expired / hour</figcaption></figure>
      <figure>${bars(t.trends.answered!, { label: 'terminal answers per hour' })}<figcaption>terminal answers / hour</figcaption></figure>
    </div>
    <h3>Outstanding against the quota (${t.maxOutstanding} per actor)</h3>
    ${
      t.outstanding.length === 0
        ? html`<p class="muted">none outstanding</p>`
        : html`<table><tr><th>actor</th><th class="num">outstanding</th></tr>
      ${t.outstanding.map((o) => html`<tr><td>${o.actor_id}</td><td class="num">${o.n} / ${t.maxOutstanding}${Number(o.n) >= t.maxOutstanding ? html` ${badge('full', 'bad')}` : ''}</td></tr>`)}</table>`
    }
  </section>`;
}

function auditPanel(d: ConsoleData) {
  return html`<section class="panel" id="panel-audit"><h2>Console actions</h2>
    ${
      d.audit
        ? html`<table><tr><th>time</th><th>operator</th><th>action</th><th>target</th><th>outcome</th></tr>
      ${d.audit.map((a) => html`<tr><td>${when(a.at)}</td><td>${a.operator}</td><td>${a.action}</td><td>${a.target ?? ''}</td><td>${a.outcome}</td></tr>`)}</table>`
        : unavailable
    }
  </section>`;
}

export function dashboardView(d: ConsoleData, p: { operator: string; csrf: string; abandoned: Row[] }) {
  return html`<header><h1>reaction-ledger console</h1><span class="muted">database time ${when(d.dbNow)}</span>
    <span>signed in as <b>${p.operator}</b></span>
    <form method="post" action="/console/logout"><input type="hidden" name="csrf" value="${p.csrf}"><button type="submit">Sign out</button></form></header>
    <main>${typingPanel(d, p.csrf, p.abandoned)}${effectsPanel(d, p.csrf)}${larkPanel(d, p.csrf)}${retentionPanel(d, p.csrf)}${ticketsPanel(d)}${auditPanel(d)}</main>`;
}
