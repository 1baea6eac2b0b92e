// The "Sweeps" tab of a DAG: every sweep of a DAG run, its counts, best trial, plots (progress with the best so far,
// the Pareto front, a slice per numeric parameter, a strip per categorical one), parallel coordinates with range
// selection, parameter importance, a comparison with another run, the leaderboard, intermediate reports, a PBT
// population, pruned and failed trials; a trial's parameters and output on a click.
import { Box, Flex, NativeSelect } from "@chakra-ui/react";
import { useCallback, useMemo, useState } from "react";

import { API, useJson } from "src/api/client";
import type { Comparison, Curve, Importance, Population, Sweep, Sweeps as SweepsAnswer, Trial } from "src/api/types";
import { EChart } from "src/charts/EChart";
import {
  type LineSeries, type PlotPoint, type Scale, type XY, importanceOption, linesOption, parallelOption, populationOption, scatterOption, stripOption,
} from "src/charts/plots";
import type { ChartInk } from "src/charts/theme";
import { A, Card, DataTable, ErrorBox, Legend, Loading, Muted, Note, Page, Pill } from "src/components/common";
import { BEST, GREY, ORANGE, RED, ROUND_COLORS, STATE_COLORS, TRIAL, memberColor, roundColor, trialColor } from "src/lib/colors";
import { dur, fmtValue, shorten } from "src/lib/format";
import { tiHref } from "src/lib/links";
import { populationSeries } from "src/lib/population";
import {
  COUNT_ORDER, COUNT_TITLES, MAX_PARAM_COLUMNS, type Selection, bestLine, flatParams, keptCount, paretoPlot, parallelAxes, parallelLines,
  progressPoints, rounds as roundsOf, slicePoints, sortedPoints, stripPoints,
} from "src/lib/sweep";

const e = encodeURIComponent;
const fmtv = (v: unknown) => (typeof v === "number" ? fmtValue(v) : "–");

interface ScatterProps {
  points: PlotPoint[];
  line?: XY[];
  lineColor?: string;
  xLabel: string;
  yLabel: string;
  xScale?: Scale | undefined;
  yScale?: Scale;
  wholeX?: boolean;
  width?: number;
  height?: number;
  testid: string;
  onPick?: (id: string) => void;
}

export function Scatter({ points, line, lineColor, xLabel, yLabel, xScale = "linear", yScale = "linear", wholeX, width = 420, height = 240, testid, onPick }: ScatterProps) {
  const option = useCallback((ink: ChartInk) => scatterOption({ points, line, lineColor, xLabel, yLabel, xScale, yScale, wholeX }, ink),
    [points, line, lineColor, xLabel, yLabel, xScale, yScale, wholeX]);
  if (!points.length) return null;
  return (
    <EChart option={option} width={width} height={height} testid={testid} label={`${yLabel} against ${xLabel}`}
      attrs={{ xscale: xScale, yscale: yScale, points: points.length, line: line && line.length > 1 ? line.length : 0 }}
      onClick={(p) => { const id = (p.data as { id?: string } | undefined)?.id; if (id && onPick) onPick(id); }} />
  );
}

function Lines({ series, xLabel, yLabel, testid, width = 420, height = 240 }: { series: LineSeries[]; xLabel: string; yLabel: string; testid: string; width?: number; height?: number }) {
  const option = useCallback((ink: ChartInk) => linesOption(series, xLabel, yLabel, ink), [series, xLabel, yLabel]);
  if (!series.some((s) => s.points.length)) return null;
  return <EChart option={option} width={width} height={height} testid={testid} label={`${yLabel} by ${xLabel}`} attrs={{ series: series.length }} />;
}

function Strip({ sweep, name, values, bestIndex, onPick }: { sweep: Sweep; name: string; values: string[]; bestIndex: number | null; onPick: (id: string) => void }) {
  const obj = sweep.objective;
  const pts = useMemo(() => stripPoints(sortedPoints(sweep), name, values, bestIndex), [sweep, name, values, bestIndex]);
  const option = useCallback((ink: ChartInk) => stripOption(pts, values, name, obj?.score_label ?? "", ink), [pts, values, name, obj]);
  if (!pts.length) return null;
  return (
    <Box>
      <Note>{`${obj?.score_label} by ${name}`}</Note>
      <Legend items={[["best trial", BEST], ["trial", TRIAL]]} />
      <EChart option={option} width={300} height={200} testid={`plot-${name}`} label={`${obj?.score_label} by ${name}`} attrs={{ points: pts.length, categories: values.length }}
        onClick={(p) => { const id = (p.data as { id?: string } | undefined)?.id; if (id) onPick(id); }} />
    </Box>
  );
}

function Curves({ curves, metric }: { curves: Curve[]; metric: string }) {
  const series = useMemo((): LineSeries[] => [...curves].sort((a, b) => Number(a.state === "running") - Number(b.state === "running")).map((c) => {
    const last = c.points[c.points.length - 1] ?? [0, 0];
    return { name: `${c.index}`, color: STATE_COLORS[c.state] ?? GREY, points: c.points, width: c.state === "running" ? 2 : 1.2,
      opacity: c.state === "running" ? 0.95 : 0.6, z: c.state === "running" ? 3 : 2,
      title: `trial ${c.index} ${c.label} (${c.state}): ${metric} ${fmtValue(last[1])} at step ${last[0]}` };
  }), [curves, metric]);
  const states = curves.reduce<Record<string, number>>((m, c) => ({ ...m, [c.state]: (m[c.state] ?? 0) + 1 }), {});
  const option = useCallback((ink: ChartInk) => linesOption(series, "step", metric, ink), [series, metric]);
  return <EChart option={option} width={560} height={260} testid="plot-reports" label={`${metric} by step`}
    attrs={{ series: series.length, ...Object.fromEntries(Object.entries(states).map(([k, n]) => [`state-${k}`, n])) }} />;
}

function ParallelCoordinates({ sweep, onPick, picked }: { sweep: Sweep; onPick: (id: string) => void; picked: string | null }) {
  const obj = sweep.objective;
  const pts = useMemo(() => sortedPoints(sweep), [sweep]);
  const axes = useMemo(() => parallelAxes(sweep), [sweep]);
  const [selection, setSelection] = useState<Selection>({});
  const lines = useMemo(() => (obj ? parallelLines(pts, axes, obj, picked) : []), [pts, axes, obj, picked]);
  const option = useCallback((ink: ChartInk) => parallelOption(axes, lines, ink), [axes, lines]);
  if (!obj || axes.length < 2 || !pts.length) return null;
  const selected = Object.values(selection).some((x) => x.length);
  const width = Math.max(400, 64 + 90 + 118 * (axes.length - 1));
  return (
    <Box>
      <Note data-testid="pc-selection">
        {selected ? `${keptCount(pts, axes, selection)} of ${pts.length} trials in the selected ranges · drag on an axis outside the range to clear it`
          : `${pts.length} trials, coloured by ${obj.score_label} (pale: worst, deep blue: best) · drag along an axis to select a range · click a line for its trial`}
      </Note>
      <EChart option={option} width={width} height={300} testid="plot-parallel" label="parallel coordinates"
        attrs={{ lines: lines.length, axes: axes.length }}
        onClick={(p) => { const id = (p.data as { id?: string } | undefined)?.id; if (id) onPick(id); }}
        after={(c) => {  // the ranges selected stay selected when the lines are drawn again (a trial picked, the colour mode)
          for (const [name, intervals] of Object.entries(selection)) {
            const k = axes.findIndex((a) => a.name === name);
            if (k >= 0 && intervals.length) c.dispatchAction({ type: "axisAreaSelect", parallelAxisId: `axis-${k}`, intervals });
          }
        }}
        on={{ axisareaselected: (p) => {
          const ev = p as { parallelAxisId?: string; intervals?: number[][] };
          const name = axes[Number(String(ev.parallelAxisId ?? "").replace(/\D+/g, ""))]?.name;
          if (name !== undefined) setSelection((s) => ({ ...s, [name]: ev.intervals ?? [] }));
        } }} />
    </Box>
  );
}

function ImportancePlot({ dagId, run, group }: { dagId: string; run: string; group: string }) {
  const { data, error } = useJson<Importance>(`${API}/dags/${e(dagId)}/sweeps/importance?${new URLSearchParams({ run_id: run, group })}`, 60000);
  const rows = data?.importances ?? [];
  const option = useCallback((ink: ChartInk) => importanceOption(rows.map((r) => ({ name: r.name, value: r.importance, label: `${(100 * r.importance).toFixed(1)}%` })), ink), [rows]);
  if (!data) return error ? <Note>{`Importance: ${error}`}</Note> : <Note>parameter importance: computing…</Note>;
  return (
    <Box data-testid="importance">
      <Note>{rows.length ? `for ${data.metric}, from all ${data.trials.toLocaleString()} scored trials · ${data.method_label}${data.note ? ` (${data.note})` : ""}` : data.note}</Note>
      {rows.length ? <EChart option={option} width={470} height={rows.length * 20 + 8} testid="plot-importance" label="parameter importance"
        attrs={{ params: rows.map((r) => r.name).join(","), first: rows[0]?.name ?? "" }} /> : null}
    </Box>
  );
}

function TrialPanel({ dagId, run, group, trialId, onClose }: { dagId: string; run: string; group: string; trialId: string; onClose: () => void }) {
  const { data, error } = useJson<Trial>(`${API}/dags/${e(dagId)}/sweeps/trial?${new URLSearchParams({ run_id: run, group, trial_id: trialId })}`, 10000);
  const close = <A href="#" float="right" onClick={(ev: React.MouseEvent) => { ev.preventDefault(); onClose(); }}>close</A>;
  if (!data) return <Card highlight data-testid="trial-panel">{close}<ErrorBox error={error} />{error ? null : <Loading what="loading the trial…" />}</Card>;
  const flat = flatParams(data.params);
  return (
    <Card highlight data-testid="trial-panel">
      {close}
      <Box fontWeight="semibold">{`Trial ${data.index} ${data.label} `}<Pill text={data.state} color={STATE_COLORS[data.state]} />
        {data.task_id ? <A href={tiHref(dagId, run, data.task_id, data.map_index)} fontWeight="normal">task instance (Airflow log)</A> : data.skipped ? <Muted>ran in an earlier DAG run</Muted> : null}
      </Box>
      <Note>{Object.entries(flat).map(([k, v]) => `${k}=${typeof v === "number" ? fmtValue(v) : JSON.stringify(v)}`).join(" · ")}</Note>
      {data.result ? <Box data-testid="trial-result">Result: <code>{JSON.stringify(data.result).slice(0, 400)}</code></Box> : null}
      {data.error ? <Box color={RED}>{data.error}</Box> : null}
      {data.seconds !== null ? <Note>{`ran ${dur(data.seconds)}`}</Note> : null}
      <Box fontWeight="semibold" mt="1.5">Output <Muted fontWeight="normal">{data.log_path ? `last lines of ${data.log_path}` : ""}{data.log_note ? ` · ${data.log_note}` : ""}</Muted></Box>
      {data.log_tail !== null
        ? <Box as="pre" data-testid="trial-log" bg="bg.muted" p="2" borderRadius="md" overflowX="auto" fontSize="xs" maxH="420px" whiteSpace="pre-wrap">{data.log_tail || "(empty)"}</Box>
        : <Note data-testid="trial-log-missing">{data.log_note || "no output"}</Note>}
    </Card>
  );
}

function Compare({ dagId, run, group, runs }: { dagId: string; run: string; group: string; runs: string[] }) {
  const others = runs.filter((r) => r !== run);
  const [other, setOther] = useState("");
  const { data, error } = useJson<Comparison>(other ? `${API}/dags/${e(dagId)}/sweeps/compare?${new URLSearchParams({ run_id: run, other, group })}` : null);
  const short = (r: string) => shorten(r, 34);
  const progress = useMemo((): LineSeries[] => (data ? [{ name: data.a.run, color: TRIAL, points: data.a.best_so_far }, { name: data.b.run, color: ORANGE, points: data.b.best_so_far }] : []), [data]);
  const pairs = useMemo((): PlotPoint[] => (data ? data.pairs.map((p) => ({ x: p.a, y: p.b, title: `trial ${p.index} ${p.label}: ${fmtValue(p.a)} → ${fmtValue(p.b)}` })) : []), [data]);
  const diag = useMemo((): XY[] => {
    const all = pairs.flatMap((p) => [p.x, p.y]);
    return all.length ? [{ x: Math.min(...all), y: Math.min(...all) }, { x: Math.max(...all), y: Math.max(...all) }] : [];
  }, [pairs]);
  const pick = (
    <label>Compare this run with{" "}
      <NativeSelect.Root size="xs" width="auto" display="inline-flex">
        <NativeSelect.Field value={other} data-testid="compare-run" onChange={(ev) => setOther(ev.target.value)}>
          <option value="">{others.length ? "(choose a run)" : "(no other run)"}</option>
          {others.map((r) => <option key={r} value={r}>{r}</option>)}
        </NativeSelect.Field>
        <NativeSelect.Indicator />
      </NativeSelect.Root>
    </label>
  );
  if (!other) return <Box data-testid="compare">{pick}</Box>;
  if (!data || data.b.run !== other) return <Box data-testid="compare">{pick}<ErrorBox error={error} />{error ? null : <Loading what="comparing…" />}</Box>;
  return (
    <Box data-testid="compare">
      {pick}
      <DataTable testid="compare-runs" head={["run", "scored", `best ${data.metric}`, "best trial", "counts"]} rows={[data.a, data.b].map((s) => ({ cells: [
        <span key="r" title={s.run}>{short(s.run)}</span>, `${s.scored}`, s.best ? fmtv(s.best.score) : "–", s.best ? `${s.best.index} ${s.best.label}` : "–",
        Object.entries(s.counts).filter(([, v]) => v).map(([k, v]) => `${k} ${v}`).join(", ")] }))} />
      <Note data-testid="compare-summary">{`${data.both} trial(s) scored in both runs: ${data.changed} changed (${data.better_in_b} better and ${data.worse_in_b} worse in ${short(data.b.run)}); ${data.only_a} only in this run, ${data.only_b} only in the other.`}</Note>
      <Flex wrap="wrap">
        <Box>
          <Note>{`best ${data.metric} so far`}</Note>
          <Legend testid="legend-compare" items={[[short(data.a.run), TRIAL, "line"], [short(data.b.run), ORANGE, "line"]]} />
          <Lines series={progress} xLabel="trial" yLabel={data.metric} testid="plot-compare-progress" />
        </Box>
        {pairs.length ? (
          <Box>
            <Note>{`${data.metric}: this run against the other, per trial`}</Note>
            <Legend items={[["same score", BEST, "line"], ["trial", TRIAL]]} />
            <Scatter points={pairs} line={diag} xLabel={short(data.a.run)} yLabel={short(data.b.run)} testid="plot-compare" />
          </Box>
        ) : null}
      </Flex>
      {data.changed ? (
        <DataTable testid="compare-changed" head={["trial", "this run", "other run", "difference"]} rows={data.pairs.filter((p) => p.diff !== 0).slice(0, 10).map((p) => ({ cells: [
          `${p.index} ${p.label}`, fmtv(p.a), fmtv(p.b), `${p.diff > 0 ? "+" : ""}${fmtValue(p.diff)}`] }))} />
      ) : null}
    </Box>
  );
}

function PopulationPlot({ pop }: { pop: Population }) {
  const { series, exploits } = useMemo(() => populationSeries(pop), [pop]);
  const option = useCallback((ink: ChartInk) => populationOption(series, exploits, pop.metric || "score", ink), [series, exploits, pop.metric]);
  const generations = Math.max(0, ...pop.members.map((m) => m.generations.length));
  const hyper = (h: Record<string, unknown> | undefined) => pop.params.filter((n) => n in (h ?? {})).map((n) => `${n}=${fmtValue(h?.[n])}`).join(", ");
  return (
    <Box data-testid="population">
      <Legend testid="legend-population" items={[...pop.members.map((m): [string, string, "line"] => [`member ${m.member}`, memberColor(m.member), "line"]),
        ...(pop.exploits.length ? [["exploit (copied a better member's checkpoint)", "#495057", "triangle"] as [string, string, "triangle"]] : [])]} />
      {series.length ? <EChart option={option} width={560} height={280} testid="plot-population" label={`${pop.metric} by step, one colour per member`}
        attrs={{ segments: series.filter((s) => !s.dashed).length, exploits: exploits.length }} /> : <Note>No member has reported yet.</Note>}
      <Note mt="1">Hyper-parameter schedule: each member's values per generation (→ k: it went on from member k's checkpoint with these values)</Note>
      <Box overflowX="auto">
        <DataTable testid="population-schedule" head={["member", ...Array.from({ length: generations }, (_, g) => `generation ${g}`)]} rows={pop.members.map((m) => ({ cells: [
          <span key="m" style={{ whiteSpace: "nowrap" }}><span style={{ display: "inline-block", width: 10, height: 10, borderRadius: "50%", background: memberColor(m.member), marginRight: 4 }} />{m.member}</span>,
          ...Array.from({ length: generations }, (_, g) => {
            const gen = m.generations[g];
            if (!gen) return "–";
            return (
              <span key={g} data-generation={g} style={{ whiteSpace: "nowrap" }}>
                {gen.from_member !== null ? <Pill text={`→ ${gen.from_member}`} color={memberColor(gen.from_member)} title={`went on from member ${gen.from_member}'s checkpoint`} /> : null}
                {hyper(gen.hyper)}
                {gen.score !== null ? <Muted>{` · ${fmtValue(gen.score)}`}</Muted> : null}
              </span>
            );
          })] }))} />
      </Box>
      {pop.cut ? <Note>{pop.cut}</Note> : null}
    </Box>
  );
}

function SweepCard({ sweep, dagId, focus, runs }: { sweep: Sweep; dagId: string; focus: boolean; runs: string[] }) {
  const [picked, setPicked] = useState<string | null>(null);
  const [logScore, setLogScore] = useState(false);
  const obj = sweep.objective;
  const several = !!obj?.several;
  const pts = useMemo(() => sortedPoints(sweep), [sweep]);
  const bestIndex = sweep.best ? sweep.best.index : null;
  const line = useMemo(() => bestLine(sweep, pts), [sweep, pts]);
  const progress = useMemo(() => progressPoints(pts, bestIndex, picked), [pts, bestIndex, picked]);
  const pareto = useMemo(() => (obj && several ? paretoPlot(pts, obj) : null), [pts, obj, several]);
  const roundList = roundsOf(pts);
  const canLog = pts.length > 0 && pts.every((p) => p.score > 0);
  const yScale: Scale = canLog && logScore ? "log" : "linear";
  const pick = useCallback((id: string) => setPicked((was) => (id === was ? null : id)), []);
  const counts = sweep.counts;
  const paramNames = [...new Set(sweep.leaderboard.flatMap((r) => Object.keys(flatParams(r.params))))];
  const shownParams = paramNames.slice(0, MAX_PARAM_COLUMNS);
  const curveStates = [...new Set(sweep.curves.map((c) => c.state))];
  const pickLink = (r: { trial_id?: string | null }) => (r.trial_id
    ? <A href="#" data-testid="pick-trial" title="its parameters and output" onClick={(ev: React.MouseEvent) => { ev.preventDefault(); pick(r.trial_id as string); }}>output</A> : "");
  // "earlier run" only for a trial an earlier DAG run did (skipped here); a trial of this run whose task is not
  // known yet (an asynchronous sweep's trial before its worker publishes it) has no link
  const taskLink = (r: { task_id?: string | null; map_index?: number | null; skipped?: boolean }) => (r.task_id
    ? <A href={tiHref(dagId, sweep.run, r.task_id, r.map_index)}>task</A> : r.skipped ? <Muted>earlier run</Muted> : <Muted>–</Muted>);
  const bestLegend: [string, string] = ["best trial", BEST];
  return (
    <Card highlight={focus} id={`sweep-${sweep.group}`} data-testid={`sweep-${sweep.group}`}>
      <Box fontSize="md" fontWeight="semibold">{`Sweep ${sweep.sweep} `}
        <Muted fontWeight="normal">{`${sweep.search} search on ${sweep.backend}${sweep.rounds ? ` · ${sweep.rounds} round(s) so far` : ""}${obj ? ` · ${obj.describe}` : " · no objective"}${obj && obj.weights ? ` · ranked by ${obj.score_label}` : ""}`}</Muted>
      </Box>
      <Box my="1.5" data-testid="counts">
        {COUNT_ORDER.filter((k) => !["stopped", "not_started"].includes(k) || counts[k]).map((k) => (
          <span key={k} data-count={k} title={COUNT_TITLES[k]}><Pill text={`${k.replace("_", " ")} ${counts[k] ?? 0}`} color={STATE_COLORS[k]} title={COUNT_TITLES[k]} /></span>
        ))}
        <Muted data-count="skipped" title="succeeded or pruned in an earlier DAG run and not run again (counted in their state too)">{` · ${counts.skipped ?? 0} from earlier runs (skipped)`}</Muted>
      </Box>
      {sweep.best && obj ? (
        <Box data-testid="best" my="1.5">Best:{" "}
          <b>{several && !obj.weights ? `${obj.metrics.map((m) => `${m} = ${fmtv(sweep.best?.values?.[m])}`).join(", ")} (Pareto front, best ${obj.metrics[0]})` : `${obj.score_label} = ${fmtv(sweep.best.score)}`}</b>
          {` — trial ${sweep.best.index} ${sweep.best.label} `}
          {sweep.best.task_id ? <A href={tiHref(dagId, sweep.run, sweep.best.task_id, sweep.best.map_index)}>task instance</A> : sweep.best.skipped ? <Muted>(succeeded in an earlier run)</Muted> : null}
        </Box>
      ) : null}
      {sweep.points_note ? <Note data-testid="points-note">{sweep.points_note}</Note> : null}
      {obj && progress.length ? (
        <Flex wrap="wrap" alignItems="flex-start" data-testid="plots">
          {pareto ? (
            <Box>
              <Note>{`${obj.metrics[1]} against ${obj.metrics[0]}`}</Note>
              <Legend items={[["Pareto front", BEST], ["other trials", TRIAL]]} />
              <Scatter points={pareto.points} line={pareto.line} xLabel={obj.metrics[0] ?? ""} yLabel={obj.metrics[1] ?? ""} testid="plot-pareto" />
            </Box>
          ) : null}
          <Box>
            <Note>{`${obj.score_label} by trial`}</Note>
            <Legend testid="legend-progress" items={[["best so far", BEST, "line"], ...(roundList.length > 1
              ? roundList.map((r): [string, string] => [`round ${r}`, roundColor(r)]) : [["trial", ROUND_COLORS[0] as string] as [string, string]])]} />
            <Scatter points={progress} line={line} xLabel="trial" yLabel={obj.score_label} testid="plot-progress" yScale={yScale} wholeX onPick={pick} />
          </Box>
          {sweep.numeric_params.map((name) => (
            <SliceCard key={name} sweep={sweep} name={name} bestIndex={bestIndex} picked={picked} yScale={yScale} onPick={pick} legend={bestLegend} />
          ))}
          {Object.entries(sweep.categorical_params).map(([name, values]) => (
            <Strip key={name} sweep={sweep} name={name} values={values} bestIndex={bestIndex} onPick={pick} />
          ))}
        </Flex>
      ) : null}
      {picked ? <TrialPanel key={picked} dagId={dagId} run={sweep.run} group={sweep.group ?? ""} trialId={picked} onClose={() => setPicked(null)} /> : null}
      {obj && progress.length ? (
        <Box data-testid="analysis">
          {canLog ? (
            <Box as="label" display="block" mt="1" color="fg.muted" fontSize="xs">
              <input type="checkbox" checked={logScore} data-testid="log-score" onChange={(ev) => setLogScore(ev.target.checked)} />{` ${obj.score_label} on a log axis`}
            </Box>
          ) : null}
          <SubSection title="Parallel coordinates" testid="parallel" note={sweep.points_note ? `the same ${pts.length.toLocaleString()} trials as the plots` : ""}>
            <ParallelCoordinates sweep={sweep} onPick={pick} picked={picked} />
          </SubSection>
          <SubSection title="Parameter importance" testid="importance-section"><ImportancePlot dagId={dagId} run={sweep.run} group={sweep.group ?? ""} /></SubSection>
          <SubSection title="Compare runs" testid="compare-section"><Compare dagId={dagId} run={sweep.run} group={sweep.group ?? ""} runs={runs} /></SubSection>
        </Box>
      ) : null}
      {obj ? (
        <Box>
          <Box fontWeight="semibold" mt="1.5">Leaderboard</Box>
          {sweep.leaderboard.length === 0 ? (
            <Note data-testid="no-score">{counts.stopped || counts.not_started
              ? "This run was stopped before any of its trials had a score; the sweep's earlier results stand, in the runs that made them." : "No trial has a score yet."}</Note>
          ) : (
            <Box overflowX="auto">
              <DataTable testid="leaderboard" head={["rank", ...(several ? ["front", ...obj.metrics] : []), ...(several && !obj.weights ? [] : [obj.score_label]), "trial",
                ...shownParams, ...(paramNames.length > shownParams.length ? ["more parameters"] : []), "time", "", ""]}
                rows={sweep.leaderboard.map((r) => {
                  const flat = flatParams(r.params);
                  const rest = paramNames.slice(MAX_PARAM_COLUMNS).filter((n) => n in flat).map((n) => `${n}=${fmtValue(flat[n])}`);
                  return { key: r.trial_id, highlight: r.trial_id === picked, cells: [
                    `${r.rank}`,
                    ...(several ? [r.front ? `${r.front}` : "–", ...obj.metrics.map((m) => fmtv(r.values?.[m]))] : []),
                    ...(several && !obj.weights ? [] : [fmtv(r.score)]),
                    <span key="t" title={r.label} style={{ whiteSpace: "nowrap" }}>{r.index}</span>,
                    ...shownParams.map((n) => (n in flat ? <ParamCell key={n} v={flat[n]} /> : "–")),
                    ...(paramNames.length > shownParams.length ? [<Muted key="m">{rest.join(", ")}</Muted>] : []),
                    dur(r.seconds), taskLink(r), pickLink(r)] };
                })} />
            </Box>
          )}
        </Box>
      ) : null}
      {sweep.curves.length && sweep.curve_metric ? (
        <Box data-testid="reports">
          <Box fontWeight="semibold" mt="1.5">Intermediate reports</Box>
          <Note>{`${sweep.curve_metric} by step, one line per trial (${sweep.curves.length} trial(s) with reports)`}</Note>
          <Legend testid="legend-reports" items={curveStates.map((st): [string, string, "line"] => [st, STATE_COLORS[st] ?? GREY, "line"])} />
          <Curves curves={sweep.curves} metric={sweep.curve_metric} />
          {sweep.latest_reports.length ? (
            <DataTable testid="latest-reports" head={["running trial", "step", "latest metrics", "checkpoint", ""]} rows={sweep.latest_reports.map((r) => ({ cells: [
              <span key="t" title={r.label}>{r.index}</span>, `${r.step}`,
              Object.entries(r.metrics).map(([k, v]) => `${k} ${typeof v === "number" ? fmtValue(v) : String(v)}`).join(", "),
              r.checkpoint || "", r.task_id ? <A key="a" href={tiHref(dagId, sweep.run, r.task_id, r.map_index)}>task</A> : ""] }))} />
          ) : null}
        </Box>
      ) : null}
      {sweep.reports_note ? <Note data-testid="reports-note">{sweep.reports_note}</Note> : null}
      {sweep.population ? (
        <SubSection title="Population" testid="population-section" note={`${sweep.population.members.length} members, ${sweep.population.exploits.length} exploit(s)`}>
          <PopulationPlot pop={sweep.population} />
        </SubSection>
      ) : null}
      {sweep.population_note ? <Note data-testid="population-note">{sweep.population_note}</Note> : null}
      {sweep.truncated ? <Note>{`${sweep.truncated} trials are not listed (too many to publish).`}</Note> : null}
      {sweep.pruned.length ? (
        <Box>
          <Box fontWeight="semibold" mt="1.5">{`Pruned (${counts.pruned || sweep.pruned.length})`}</Box>
          <DataTable testid="pruned" head={["trial", "stopped at step", "why", "", ""]} rows={sweep.pruned.map((p) => ({ cells: [
            <span key="t" title={p.label}>{`${p.index} ${p.label}`}</span>, p.step === null || p.step === undefined ? "–" : `${p.step}`, p.error || "",
            p.skipped ? <Muted key="s">earlier run</Muted> : taskLink(p), pickLink(p)] }))} />
        </Box>
      ) : null}
      {sweep.problems.length ? (
        <Box>
          <Box fontWeight="semibold" mt="1.5">Failed, invalid or timed out</Box>
          <DataTable testid="problems" head={["trial", "state", "error", "", ""]} rows={sweep.problems.map((p) => ({ cells: [
            `${p.index} ${p.label}`, <Pill key="s" text={p.state ?? ""} color={STATE_COLORS[p.state ?? ""]} />, p.error || "",
            p.task_id ? <A key="a" href={tiHref(dagId, sweep.run, p.task_id, p.map_index)}>task</A> : "", pickLink(p)] }))} />
        </Box>
      ) : null}
    </Card>
  );
}

function SliceCard({ sweep, name, bestIndex, picked, yScale, onPick, legend }: { sweep: Sweep; name: string; bestIndex: number | null; picked: string | null; yScale: Scale; onPick: (id: string) => void; legend: [string, string] }) {
  const points = useMemo(() => slicePoints(sortedPoints(sweep), name, bestIndex, picked), [sweep, name, bestIndex, picked]);
  const label = sweep.objective?.score_label ?? "";
  return (
    <Box data-testid="slice">
      <Note>{`slice: ${label} against ${name}`}</Note>
      <Legend items={[legend, ["earlier trial", trialColor(0, 1)], ["later trial", trialColor(1, 1)]]} />
      <Scatter points={points} xLabel={name} yLabel={label} xScale={sweep.param_scales[name] === "log" ? "log" : "linear"} yScale={yScale}
        width={300} height={200} testid={`plot-${name}`} onPick={onPick} />
    </Box>
  );
}

function SubSection({ title, testid, note, children }: { title: string; testid: string; note?: string; children: React.ReactNode }) {
  return (
    <Box data-testid={testid} mt="2.5">
      <Box fontWeight="semibold">{title}{note ? <Muted fontWeight="normal">{` · ${note}`}</Muted> : null}</Box>
      {children}
    </Box>
  );
}

function ParamCell({ v }: { v: unknown }) {
  const text = Array.isArray(v) ? JSON.stringify(v) : fmtValue(v);
  return <span title={typeof v === "number" ? `${v}` : text} style={{ whiteSpace: "nowrap" }}>{shorten(text, 24)}</span>;
}

export function Sweeps({ dagId }: { dagId: string }) {
  const q = new URLSearchParams(window.location.search);
  const [runId, setRunId] = useState(q.get("run_id") || "");
  const { data, error } = useJson<SweepsAnswer>(`${API}/dags/${e(dagId)}/sweeps${runId ? `?run_id=${e(runId)}` : ""}`, 10000);
  if (!data) return <Page><ErrorBox error={error} />{error ? null : <Loading />}</Page>;
  return (
    <Page title={`Sweeps of ${dagId}`} testid="sweeps">
      {data.runs.length ? (
        <label>DAG run{" "}
          <NativeSelect.Root size="xs" width="auto" display="inline-flex">
            <NativeSelect.Field value={data.run_id ?? ""} data-testid="run" onChange={(ev) => setRunId(ev.target.value)}>
              {data.runs.map((r) => <option key={r} value={r}>{r}</option>)}
            </NativeSelect.Field>
            <NativeSelect.Indicator />
          </NativeSelect.Root>
          <Muted> · refreshes every 10 s</Muted>
        </label>
      ) : null}
      <ErrorBox error={error} />
      {data.sweeps.length === 0 ? <Card>No sweep has been planned in this DAG yet.</Card> : null}
      {data.sweeps.map((s) => <SweepCard key={`${data.run_id}/${s.group}`} sweep={s} dagId={dagId} focus={q.get("sweep") === s.sweep} runs={data.runs} />)}
      {data.problems.length ? <ul>{data.problems.map((p, i) => <li key={i}>{p}</li>)}</ul> : null}
    </Page>
  );
}
