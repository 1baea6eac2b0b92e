// One chart: an ECharts instance on a div of a given size, its option rebuilt from the page's data and colour mode.
// What it asks ECharts to draw goes through textOnly (text.ts): every tooltip shows its text as text, never as markup.
// Each chart is also listed in globalThis.gpuschedCharts under its test id (the browser tests read what it drew).
import { useEffect, useRef } from "react";

import { type ECharts, type EChartsOption, echarts } from "./echarts";
import { textOnly } from "./text";
import { type ChartInk, ink, useColorMode } from "./theme";

declare global {
  // eslint-disable-next-line no-var
  var gpuschedCharts: Record<string, ECharts> | undefined;
}

/** canvas in a browser; SVG where there is no canvas (the unit tests' jsdom) */
export let defaultRenderer: "canvas" | "svg" = "canvas";
export function drawChartsWithSvg(): void {
  defaultRenderer = "svg";
}

export interface EChartProps {
  option: (ink: ChartInk) => EChartsOption;
  width: number;
  height: number;
  testid: string;
  label: string;
  attrs?: Record<string, string | number>;
  onClick?: (params: echarts.ECElementEvent) => void;
  on?: Record<string, (params: unknown) => void>;
  /** after each drawing: what the chart keeps across its option being rebuilt (the parallel axes' selected ranges) */
  after?: (chart: ECharts) => void;
}

export function EChart({ option, width, height, testid, label, attrs, onClick, on, after }: EChartProps) {
  const el = useRef<HTMLDivElement>(null);
  const chart = useRef<ECharts | null>(null);
  const mode = useColorMode();
  const handlers = useRef({ onClick, on, after });
  handlers.current = { onClick, on, after };
  useEffect(() => {
    if (!el.current) return undefined;
    const c = echarts.init(el.current, null, { renderer: defaultRenderer, width, height });
    chart.current = c;
    c.on("click", (p) => handlers.current.onClick?.(p as echarts.ECElementEvent));
    for (const name of Object.keys(handlers.current.on ?? {})) c.on(name, (p: unknown) => handlers.current.on?.[name]?.(p));
    globalThis.gpuschedCharts = { ...(globalThis.gpuschedCharts ?? {}), [testid]: c };
    return () => {
      if (globalThis.gpuschedCharts?.[testid] === c) delete globalThis.gpuschedCharts[testid];
      c.dispose();
      chart.current = null;
    };
  }, [testid, width, height]);
  useEffect(() => {
    if (!chart.current) return;
    chart.current.setOption(textOnly({ animation: false, textStyle: { fontFamily: "inherit" }, ...option(ink(mode)) }), { notMerge: true });
    handlers.current.after?.(chart.current);
  }, [option, mode, width, height]);
  return <div ref={el} data-testid={testid} data-echart role="img" aria-label={label} style={{ width, height, margin: "4px 12px 4px 0" }} {...prefixed(attrs)} />;
}

function prefixed(attrs?: Record<string, string | number>): Record<string, string> {
  const out: Record<string, string> = {};
  // a key may hold a name from the API (a curve's state): only the characters an attribute name may have
  for (const [k, v] of Object.entries(attrs ?? {})) out[`data-${k.replace(/[^\w-]/g, "_")}`] = String(v);
  return out;
}
