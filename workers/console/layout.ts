import { html, raw } from 'hono/html';

/** The page's only styles: inline, so the CSP needs no style host. */
const STYLE = `
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f5f6f8;color:#1d2330}
header{display:flex;gap:1rem;align-items:center;padding:.6rem 1.2rem;background:#1d2330;color:#fff}
header h1{font-size:1rem;margin:0;flex:1}header form{margin:0}
main{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:1rem;padding:1rem}
#panel-typing,#panel-effects,#panel-lark{grid-column:1/-1}
section.panel{background:#fff;border:1px solid #d9dde5;border-radius:6px;padding:.8rem 1rem;overflow:auto}
section h2{font-size:1rem;margin:.1rem 0 .6rem}h3{font-size:.85rem;margin:.8rem 0 .3rem;color:#4a5468}
table{border-collapse:collapse;width:100%;font-size:12.5px}th,td{text-align:left;padding:2px 6px;border-bottom:1px solid #eef0f4;white-space:nowrap}
th{color:#4a5468;font-weight:600}.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:0 .45rem;border-radius:9px;font-size:12px;background:#e6e9ef}
.ok{background:#d8f3dc;color:#1b5e20}.warn{background:#fff3cd;color:#7a5a00}.bad{background:#fde2e1;color:#8c1d18}
svg.chart{display:block;background:#fafbfc;border:1px solid #eef0f4}svg .pt{fill:#3b6fd8}
svg .axis{stroke:#c4c9d4}svg .limit{stroke:#d33;stroke-dasharray:3 3}
.charts{display:flex;gap:1rem;flex-wrap:wrap}.charts figure{margin:0}.charts figcaption{font-size:12px;color:#4a5468}
form.act{display:inline-flex;gap:.3rem;align-items:center;margin:.2rem .6rem .2rem 0;font-size:12px}
button{font:inherit;padding:.15rem .6rem;cursor:pointer}.muted{color:#7a8397}.err{color:#8c1d18}
.login{max-width:360px;margin:10vh auto;background:#fff;padding:1.5rem;border:1px solid #d9dde5;border-radius:6px}
.login label{display:block;margin:.6rem 0 .2rem}.login input{width:100%;box-sizing:border-box;padding:.35rem}
`;

/** The small client script: reload every 30 s while no form field has focus or is ticked. */
const SCRIPT = `setInterval(function(){var a=document.activeElement;
if(a&&(a.tagName==='INPUT'||a.tagName==='BUTTON'))return;
if(document.querySelector('form.act input[type=checkbox]:checked'))return;
location.reload()},30000);`;

export function page(title: string, nonce: string, body: unknown) {
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${title}</title><style nonce="${nonce}">${raw(STYLE)}</style></head>
<body>${body}<script nonce="${nonce}">${raw(SCRIPT)}</script></body></html>`;
}

/** Headers of every console answer: no caching, no framing, only this page's own inline code. */
export function securityHeaders(nonce: string): Record<string, string> {
  return {
    'cache-control': 'no-store',
    'content-security-policy': `default-src 'none'; style-src 'nonce-${nonce}'; script-src 'nonce-${nonce}'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
    'referrer-policy': 'no-referrer',
    'x-content-type-options': 'nosniff',
  };
}
