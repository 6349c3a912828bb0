import { html } from 'hono/html';

/**
 * Inline SVG charts, drawn on the server: no chart library, no client script. Each bar is a
 * `<rect class="pt">` with a `<title>` (the value on hover); `data-points` counts the non-zero
 * buckets, which the browser test reads.
 */
export function bars(
  values: number[],
  opts: { label: string; width?: number; height?: number; limit?: number },
) {
  const width = opts.width ?? 240;
  const height = opts.height ?? 48;
  const max = Math.max(1, opts.limit ?? 0, ...values);
  const step = width / Math.max(1, values.length);
  const points = values.filter((v) => v > 0).length;
  const limitY = opts.limit ? height - (opts.limit / max) * (height - 2) : null;
  return html`<svg class="chart" role="img" aria-label="${opts.label}" data-points="${points}"
    width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">
    <title>${opts.label}</title>
    <line x1="0" y1="${height - 0.5}" x2="${width}" y2="${height - 0.5}" class="axis" />
    ${values.map((v, i) => {
      const h = v > 0 ? Math.max(2, (v / max) * (height - 2)) : 0;
      return html`<rect class="pt" x="${(i * step + 1).toFixed(1)}" y="${(height - h).toFixed(1)}"
        width="${Math.max(1, step - 2).toFixed(1)}" height="${h.toFixed(1)}"><title>${v}</title></rect>`;
    })}
    ${limitY === null ? '' : html`<line x1="0" y1="${limitY.toFixed(1)}" x2="${width}" y2="${limitY.toFixed(1)}" class="limit" />`}
  </svg>`;
}
