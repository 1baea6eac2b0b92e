// What a chart shows is text, never markup. Every name and value on the pages comes from what DAG authors and their
// tasks publish (DAG, run and task ids, host and class names, sweep parameters and choice values, metric names,
// errors), and ECharts writes a tooltip formatter's string into the page as HTML (innerHTML). So the option builders
// (plots.ts, timeline.ts) return plain text from their tooltip formatters, and textOnly() — which EChart.tsx, the one
// place that hands options to ECharts, applies to every option — escapes what every tooltip formatter returns, at any
// depth (the chart's tooltip, a series', a data item's, an axis'), so a formatter added later cannot forget to.
// Everything else ECharts draws (axis labels and names, series labels, the timeline's row names) is canvas or SVG
// text, never parsed as markup; a string formatter is a template whose values ECharts itself escapes.

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

type Formatter = (params: unknown, ticket?: string, callback?: (ticket: string, html: string) => void) => unknown;

const escaping = new WeakSet<Formatter>();

/** ``f`` with its answer (and an answer it gives later through ECharts' callback) escaped: shown as the text it is */
export function asText(f: Formatter): Formatter {
  if (escaping.has(f)) return f;
  const g: Formatter = (params, ticket, callback) =>
    escapeHtml(String(f(params, ticket, callback ? (t, html) => callback(t, escapeHtml(String(html))) : undefined) ?? ""));
  escaping.add(g);
  return g;
}

/** ``option`` with every tooltip formatter's answer escaped (a copy where anything changed; data arrays are walked
 * only for items that carry a tooltip of their own) */
export function textOnly<T>(option: T): T {
  return walk(option, false) as T;
}

function walk(node: unknown, inTooltip: boolean): unknown {
  if (Array.isArray(node)) {
    let changed = false;
    const out = node.map((x) => {
      const y = walk(x, inTooltip);
      if (y !== x) changed = true;
      return y;
    });
    return changed ? out : node;
  }
  if (node === null || typeof node !== "object" || Object.getPrototypeOf(node) !== Object.prototype) return node;
  let out: Record<string, unknown> | null = null;
  for (const [k, v] of Object.entries(node as Record<string, unknown>)) {
    let w = v;
    if (inTooltip && k === "formatter" && typeof v === "function") w = asText(v as Formatter);
    else if (v !== null && typeof v === "object") w = walk(v, k === "tooltip");
    if (w !== v) {
      out ??= { ...(node as Record<string, unknown>) };
      out[k] = w;
    }
  }
  return out ?? node;
}
