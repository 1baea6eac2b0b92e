// A PBT population as lines: each member's curve cut at its generations (a line per generation, in the member's
// colour), and each exploit: where the member went on from the donor's point.
import type { Population } from "src/api/types";
import type { LineSeries } from "src/charts/plots";
import { memberColor } from "src/lib/colors";
import { fmtValue } from "src/lib/format";

export interface ExploitMark {
  member: number;
  from: number;
  step: number;
  value: number;
  title: string;
}

function valueAt(pop: Population, member: number, step: number): number | null {
  const m = pop.members.find((x) => x.member === member);
  const p = m ? m.curve.filter((q) => (q[0] ?? 0) <= step).pop() : undefined;
  return p ? (p[1] ?? null) : null;
}

export function populationSeries(pop: Population): { series: LineSeries[]; exploits: ExploitMark[] } {
  const hyper = (h: Record<string, unknown>) => pop.params.filter((n) => n in h).map((n) => `${n}=${fmtValue(h[n])}`).join(", ");
  const series: LineSeries[] = [];
  for (const m of pop.members) {
    m.generations.forEach((g, i) => {
      const from = i === 0 ? -Infinity : (m.generations[i - 1]?.step ?? -Infinity);
      const pts = m.curve.filter((p) => (p[0] ?? 0) > from && (p[0] ?? 0) <= g.step);
      if (pts.length) series.push({ name: `member ${m.member} generation ${g.generation}`, title: `member ${m.member}`, color: memberColor(m.member), points: pts, width: 1.6, opacity: 0.9 });
    });
  }
  const exploits: ExploitMark[] = [];
  for (const x of pop.exploits) {
    const from = valueAt(pop, x.from_member, x.step);
    if (from === null) continue;
    const next = pop.members.find((m) => m.member === x.member)?.curve.find((q) => (q[0] ?? 0) > x.step);
    const title = `generation ${x.generation}: member ${x.member} went on from member ${x.from_member}'s checkpoint at step ${x.step} ` +
      `(${fmtValue(x.donor_score)} against its own ${fmtValue(x.score)}); ${hyper(x.old)} → ${hyper(x.new)}`;
    exploits.push({ member: x.member, from: x.from_member, step: x.step, value: from, title });
    if (next) series.push({ name: `exploit ${x.generation}/${x.member}`, title, color: memberColor(x.member), points: [[x.step, from], [next[0] ?? 0, next[1] ?? 0]], dashed: true, width: 1.6 });
  }
  return { series, exploits };
}
