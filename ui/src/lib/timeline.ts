// The timeline's layout: one band per GPU (as many lanes as its leases overlap), a host's name above its GPUs, and
// what each bar says on hover, in which colour, and where it links.
import type { Timeline, TimelineBar } from "src/api/types";
import { MARKS, NO_GROUP, classColor, groupColor } from "src/lib/colors";
import { dur } from "src/lib/format";
import { refHref, taskName } from "src/lib/links";

/** lane units: a host's name takes this much room above its first GPU, and a gap follows each GPU */
export const HEAD = 1.4;
export const GAP = 0.4;

export interface RowPlace {
  host: string;
  gpu: number;
  top: number;  // in lane units from the top
  lanes: number;
  busy: number;
  firstOfHost: boolean;
}

export function layout(data: Pick<Timeline, "rows">): { rows: RowPlace[]; height: number } {
  let y = 0;
  const rows = data.rows.map((row, i) => {
    const first = i === 0 || data.rows[i - 1]?.host !== row.host;
    if (first) y += HEAD;
    const place = { host: row.host, gpu: row.gpu, top: y, lanes: row.lanes, busy: row.busy_fraction, firstOfHost: first };
    y += row.lanes + GAP;
    return place;
  });
  return { rows, height: y };
}

export function byGroup(data: Pick<Timeline, "groups">): boolean {
  return data.groups.length > 0;
}

export function barColor(b: TimelineBar, data: Pick<Timeline, "groups" | "classes">): string {
  if (byGroup(data)) return b.group ? groupColor(b.group, data.groups) : NO_GROUP;
  return classColor(b.job_class ?? "normal", data.classes);
}

export function barTitle(b: TimelineBar): string {
  const who = taskName(b);
  const times = `${new Date(b.start * 1000).toLocaleTimeString()}–${new Date(b.end * 1000).toLocaleTimeString()} (${dur(b.end - b.start)})`;
  if (b.count) {
    const list = (m?: Record<string, number>) => Object.entries(m ?? {}).map(([k, n]) => `${n} ${k}`).join(", ");
    return `${b.count} short leases, ${times}, ${dur(b.busy)} of GPU time: ${list(b.outcomes)} · classes: ${list(b.classes)} · first: ${who}. Choose a shorter window to see each.`;
  }
  return `${who} · ${b.job_class ?? "normal"} class${b.group ? ` · group ${b.group}` : ""}${b.label ? ` · ${b.label}` : ""} · ${times} · ${b.outcome ?? ""}` +
    ((b.attempt ?? 0) > 1 ? ` (attempt ${b.attempt})` : "") + (b.request ? ` · ${b.request}` : "") + (b.detail ? ` · ${b.detail}` : "");
}

/** a bar as the chart gets it: where, in which colour, with what mark, linking where */
export interface BarItem {
  value: [number, number, number];  // start, end, top (lane units)
  color: string;
  outcome: string;
  cls: string;
  group: string;
  count: number;
  href: string | null;
  title: string;
}

export function barItems(data: Timeline, places: RowPlace[]): BarItem[] {
  const items: BarItem[] = [];
  data.rows.forEach((row, i) => {
    const place = places[i] as RowPlace;
    for (const b of row.bars) {
      items.push({
        value: [b.start, b.end, place.top + (b.lane ?? 0)],
        color: barColor(b, data),
        outcome: b.outcome ?? "",
        cls: b.job_class ?? "normal",
        group: b.group ?? "",
        count: b.count ?? 1,
        href: b.run_id ? refHref(b) : null,
        title: barTitle(b),
      });
    }
  });
  return items;
}

/** the key: what each colour and mark means */
export function timelineKey(data: Pick<Timeline, "groups" | "classes">, failed: string = MARKS.failed?.[0] ?? ""): [string, string][] {
  const colours: [string, string][] = byGroup(data)
    ? [...data.groups.map((g): [string, string] => [`group ${g}`, groupColor(g, data.groups)]),
       ["no group (work from before the quotas, or outside Airflow)", NO_GROUP]]
    : data.classes.map((c): [string, string] => [`${c} class`, classColor(c, data.classes)]);
  return [
    ...colours,
    ["merged short leases", "rgba(43,123,214,0.45)"],
    [MARKS.preempted?.[1] ?? "", MARKS.preempted?.[0] ?? ""],
    [MARKS.oom?.[1] ?? "", MARKS.oom?.[0] ?? ""],
    ["stopped by gpusched queue stop (a bar across its end)", MARKS.stopped?.[0] ?? ""],
    ["failed (outlined)", failed],
    ["at its time limit (outlined)", MARKS.timeout?.[0] ?? ""],
    ["running (dashed)", "#2b7bd6"],
  ];
}
