// The timeline's ECharts option: a custom series draws each bar (and its mark), another the rows' labels.
import type { EChartsOption } from "./echarts";
import type { ChartInk } from "./theme";
import { MARKS } from "src/lib/colors";
import { clock } from "src/lib/format";
import type { BarItem, RowPlace } from "src/lib/timeline";

export const LANE_PX = 14;
export const LABEL_PX = 210;
export const TOP_PX = 28;

export function timelineHeight(units: number): number {
  return Math.max(TOP_PX + 30, Math.ceil(TOP_PX + units * LANE_PX + 8));
}

interface Api {
  value: (dim: number) => number;
  coord: (v: [number, number]) => [number, number];
  size: (v: [number, number]) => [number, number];
}
interface Params {
  coordSys: { x: number; y: number; width: number; height: number };
  dataIndex: number;
}

export function timelineOption(since: number, until: number, items: BarItem[], rows: RowPlace[], units: number, ink: ChartInk): EChartsOption {
  const span = until - since;
  return {
    grid: { left: LABEL_PX, right: 30, top: TOP_PX, bottom: 8 },
    tooltip: { trigger: "item", confine: true, backgroundColor: ink.tooltip, borderColor: ink.line, textStyle: { color: ink.text, fontSize: 12 },
               formatter: (p: { data?: { title?: string } }) => p.data?.title ?? "" },
    xAxis: { type: "value", min: since, max: until, position: "top", axisLine: { show: false }, axisTick: { show: false },
             splitLine: { lineStyle: { color: ink.grid } },
             axisLabel: { color: ink.text, fontSize: 10, formatter: (t: number) => clock(t, span), hideOverlap: true } },
    yAxis: { type: "value", min: 0, max: units, inverse: true, show: false },
    dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "weakFilter" }],
    series: [
      {
        type: "custom",
        name: "rows",
        silent: true,
        data: rows.map((r) => ({ value: [since, r.top], host: r.host, gpu: r.gpu, lanes: r.lanes, busy: r.busy, first: r.firstOfHost })),
        renderItem: (params: Params, api: Api) => {
          const r = rows[params.dataIndex] as RowPlace;
          const [, y] = api.coord([since, r.top]);
          const h = r.lanes * LANE_PX;
          const cs = params.coordSys;
          const children: object[] = [
            { type: "rect", shape: { x: cs.x, y, width: cs.width, height: h }, style: { fill: ink.grid } },
            { type: "text", style: { x: cs.x - 6, y: y + 7, text: `GPU ${r.gpu} · ${(100 * r.busy).toFixed(0)}%`, fill: ink.text, fontSize: 11,
                                      align: "right", verticalAlign: "middle" } },
          ];
          if (r.firstOfHost) {
            children.push({ type: "text", style: { x: 4, y: y - 9, text: r.host.length > 80 ? `${r.host.slice(0, 79)}…` : r.host, fill: ink.text,
                                                  fontSize: 11, fontWeight: "bold", verticalAlign: "middle" } });
            if (params.dataIndex > 0) children.push({ type: "line", shape: { x1: 0, y1: y - 0.7 * 18, x2: cs.x + cs.width + 30, y2: y - 0.7 * 18 },
                                                        style: { stroke: ink.line, opacity: 0.5 } });
          }
          return { type: "group", children };
        },
        clip: false,
        z: 0,
      },
      {
        type: "custom",
        name: "bars",
        encode: { x: [0, 1], y: 2 },
        data: items.map((b) => ({ value: b.value, title: b.title, href: b.href, outcome: b.outcome, cls: b.cls, group: b.group, count: b.count,
                                   cursor: b.href ? "pointer" : "default" })),
        renderItem: (params: Params, api: Api) => {
          const b = items[params.dataIndex] as BarItem;
          const [x0, y0] = api.coord([api.value(0), api.value(2)]);
          const [x1] = api.coord([api.value(1), api.value(2)]);
          const cs = params.coordSys;
          const left = Math.max(cs.x, x0);
          const right = Math.min(cs.x + cs.width, x1);
          if (right < cs.x || left > cs.x + cs.width) return null;
          const w = Math.max(2, right - left);
          const y = y0 + 1;
          const h = LANE_PX - 2;
          const mark = MARKS[b.outcome];
          const outline = b.outcome === "failed" ? ink.text : mark?.[0];  // failed: the text's colour (black or white)
          const children: object[] = [{
            type: "rect",
            shape: { x: left, y, width: w, height: h, r: 2 },
            style: { fill: b.color, opacity: b.count > 1 ? 0.55 : b.outcome === "running" ? 0.95 : 0.8,
                     stroke: outline, lineWidth: mark ? 1.5 : 0, lineDash: b.outcome === "running" ? [3, 2] : undefined },
          }];
          if (mark && ["preempted", "oom", "stopped"].includes(b.outcome)) {
            const e = left + w;
            const points = b.outcome === "oom" ? [[e, y - 1], [e + 4, y + h / 2], [e, y + h + 1], [e - 4, y + h / 2]]
              : b.outcome === "stopped" ? [[e - 2, y - 1], [e + 3, y - 1], [e + 3, y + h + 1], [e - 2, y + h + 1]]
              : [[e - 4, y - 1], [e + 4, y - 1], [e, y + h]];
            children.push({ type: "polygon", shape: { points }, style: { fill: mark[0] } });
          }
          return { type: "group", children };
        },
        z: 2,
      },
    ],
  };
}
