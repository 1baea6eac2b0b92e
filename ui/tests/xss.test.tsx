// No value a DAG author controls becomes markup (issue 77, item 1): every page rendered on answers whose every name and
// value is hostile (tests/hostile.ts), every tooltip of every chart it draws asked for each point, bar and line, and
// shown; what comes out is text. The same answers drive the committed bundle in Chromium: tests/ui/test_browser.py.
import { ChakraProvider, defaultSystem } from "@chakra-ui/react";
import { fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import type { ReactNode } from "react";
import { beforeEach, describe, expect, it, vi } from "vitest";

import { type ECharts, echarts } from "src/charts/echarts";
import { textOnly } from "src/charts/text";
import { GpuBoard } from "src/pages/GpuBoard";
import { GpuTimeline } from "src/pages/GpuTimeline";
import { SlurmJob } from "src/pages/SlurmJob";
import { Sweeps } from "src/pages/Sweeps";

import { COLD, answer } from "./fixtures";
import { DAG, PAYLOADS, bad, routes } from "./hostile";

type Any = Record<string, any>;  // eslint-disable-line @typescript-eslint/no-explicit-any
type Formatter = (params: unknown, ticket?: string, callback?: (ticket: string, html: string) => void) => unknown;

const wrap = (node: ReactNode) => render(<ChakraProvider value={defaultSystem}>{node}</ChakraProvider>);

beforeEach(() => {
  vi.unstubAllGlobals();
  window.history.replaceState(null, "", "/");
  const answers = routes();
  vi.stubGlobal("fetch", vi.fn(async (url: string) => {
    const path = url.split("?")[0] ?? "";
    const key = Object.keys(answers).sort((a, b) => b.length - a.length).find((k) => path.endsWith(k));
    return key ? answer(answers[key]) : new Response(JSON.stringify({ detail: "no such page" }), { status: 404, statusText: "Not Found" });
  }));
  delete (window as Any).__xss;
});

/** markup in ``html`` (what ECharts would put into the page): the elements it makes */
function elementsIn(html: string): string[] {
  const div = document.createElement("div");
  div.innerHTML = html;
  return [...div.querySelectorAll("*")].map((el) => el.outerHTML);
}

/** what a text shows once ECharts has written it into the page */
function shown(html: string): string {
  const div = document.createElement("div");
  div.innerHTML = html;
  return div.textContent ?? "";
}

const DANGEROUS = "img, script, svg[onload], [onerror], [onload], iframe";

/** every chart on the page (each sweep's card has its own: globalThis.gpuschedCharts keeps one per test id) */
function charts(): [string, ECharts][] {
  return [...document.querySelectorAll<HTMLElement>("[data-echart]")].map((d) => [d.dataset.testid ?? "", echarts.getInstanceByDom(d) as ECharts]);
}

/** once every chart on the page is drawn (ECharts is set up in an effect, just after its div is on the page) */
async function allDrawn(): Promise<void> {
  await waitFor(() => {
    for (const [id, chart] of charts()) expect((chart?.getOption() as Any | undefined)?.series, id).toBeTruthy();
  }, COLD.wait);
}

/** every tooltip of every chart on the page, as ECharts would show it: each series' every data item's own params
 * (the item's tooltip first, then the series', then the chart's), through the formatters the chart was given */
function everyTooltip(): { chart: string; html: string }[] {
  const out: { chart: string; html: string }[] = [];
  for (const [id, chart] of charts()) {
    const option = chart.getOption() as Any;
    const model = (chart as unknown as { getModel: () => Any }).getModel();
    const top = (option.tooltip ?? [])[0]?.formatter as Formatter | undefined;
    (option.series ?? []).forEach((series: Any, i: number) => {
      const data = model.getSeriesByIndex(i)?.getData();
      for (let j = 0; j < (data?.count() ?? 0); j++) {
        const params = model.getSeriesByIndex(i).getDataParams(j);
        const item = series.data?.[j];
        const formatter = (item && typeof item === "object" && !Array.isArray(item) ? item.tooltip?.formatter : undefined) ?? series.tooltip?.formatter ?? top;
        if (typeof formatter === "function") {
          out.push({ chart: id, html: String(formatter(params)) });
          let later = "";
          formatter(params, "t", (_t: string, html: string) => { later = html; });
          if (later) out.push({ chart: id, html: later });
        }
        // and shown for real, the first few of each series (each a tooltip drawn in jsdom: about 10 ms); ECharts' showTip
        // cannot place a parallel series' tooltip (those show on a hover: tests/ui/test_browser.py hovers every item)
        if (series.type !== "parallel" && j < 3) chart.dispatchAction({ type: "showTip", seriesIndex: i, dataIndex: j });
        expect(document.querySelectorAll(DANGEROUS), `${id}: series ${i} item ${j} shown`).toHaveLength(0);
      }
    });
  }
  return out;
}

function expectOnlyText(tips: { chart: string; html: string }[]) {
  expect(tips.length).toBeGreaterThan(0);
  for (const { chart, html } of tips) expect(elementsIn(html), `${chart}: ${html}`).toEqual([]);
  expect(document.querySelectorAll(DANGEROUS)).toHaveLength(0);
  expect((window as Any).__xss).toBeUndefined();
}

describe("hostile names and values are shown as text", () => {
  it("on the Sweeps tab: plots, population, reports, compare, importance, a trial's output, tables", async () => {
    wrap(<Sweeps dagId={DAG} />);
    const card = await screen.findByTestId(`sweep-${bad("demo")}`, undefined, COLD.wait);
    await waitFor(() => expect(within(card).getByTestId("plot-importance")).toBeTruthy(), COLD.wait);
    fireEvent.change(within(card).getByTestId("compare-run"), { target: { value: bad("run0") } });
    await within(card).findByTestId("plot-compare", undefined, COLD.wait);
    fireEvent.click(within(card).getAllByTestId("pick-trial")[0] as HTMLElement);
    await screen.findByTestId("trial-log", undefined, COLD.wait);
    await allDrawn();
    const drawn = charts().map(([id]) => id);
    for (const id of ["plot-progress", `plot-${bad("lr")}`, `plot-${bad("act")}`, "plot-parallel", "plot-importance", "plot-reports", "plot-population",
      "plot-compare", "plot-compare-progress", "plot-pareto"]) expect(drawn).toContain(id);
    const tips = everyTooltip();
    expectOnlyText(tips);
    // the exploit's tooltip names the hyper-parameters' choice values: shown as the text they are
    const exploit = tips.filter((t) => t.chart === "plot-population").map((t) => shown(t.html)).find((t) => t.includes("went on from"));
    expect(exploit).toContain(PAYLOADS[0]);
    expect(exploit).toContain(`=${bad("sgd")} →`);
    expect(tips.map((t) => shown(t.html)).join("\n")).toContain(PAYLOADS[3]);  // "&lt;b&gt;" shown as typed, not as "<b>"
    expect(within(card).getByTestId("leaderboard").textContent).toContain(PAYLOADS[0]);
    expect(screen.getByTestId("population-schedule").textContent).toContain(`${bad("opt")}=${bad("adam")}`);
  }, 30_000);

  it("on the GPU board", async () => {
    wrap(<GpuBoard />);
    await screen.findByTestId("gpu-board", undefined, COLD.wait);
    expect(screen.getByTestId("lease").textContent).toContain(bad("train"));
    expect(document.querySelectorAll(DANGEROUS)).toHaveLength(0);
    expect(charts()).toEqual([]);  // no chart (a sparkline has no tooltip): React's text only
    expect((window as Any).__xss).toBeUndefined();
  }, COLD.testMs);

  it("on the GPU timeline", async () => {
    wrap(<GpuTimeline />);
    await screen.findByTestId("plot-timeline", undefined, COLD.wait);
    await allDrawn();
    const tips = everyTooltip();
    expectOnlyText(tips);
    expect(tips.map((t) => shown(t.html)).join("\n")).toContain(`${bad("d")} › ${bad("fill")}[1]`);
  }, COLD.testMs);

  it("on the Slurm tab", async () => {
    wrap(<SlurmJob dagId={DAG} runId={bad("run1")} taskId={bad("t")} />);
    expect((await screen.findByTestId("output-tail", undefined, COLD.wait)).textContent).toBe(bad("seed 0 on GPU 0"));
    expect(screen.getByTestId("slurm-job").textContent).toContain(`${bad("PENDING")} (${bad("Priority")})`);
    expect(document.querySelectorAll(DANGEROUS)).toHaveLength(0);
  }, COLD.testMs);
});

describe("textOnly (what EChart.tsx gives ECharts)", () => {
  const markup = PAYLOADS.join("");
  it("escapes every tooltip formatter, at any depth, and what one gives later through ECharts' callback", () => {
    const option = textOnly({
      tooltip: { formatter: () => markup },
      xAxis: { axisLabel: { formatter: (v: number) => `${v}` } },
      series: [{ type: "scatter", tooltip: { formatter: () => markup }, data: [{ value: [1, 2], tooltip: { formatter: () => markup } }, [3, 4]] }],
    }) as Any;
    for (const f of [option.tooltip.formatter, option.series[0].tooltip.formatter, option.series[0].data[0].tooltip.formatter] as Formatter[]) {
      expect(elementsIn(String(f({})))).toEqual([]);
      expect(shown(String(f({})))).toBe(markup);
    }
    expect(option.xAxis.axisLabel.formatter(3)).toBe("3");  // not a tooltip: canvas text, left alone
    let later = "";
    const async = textOnly({ tooltip: { formatter: (_p: unknown, t: string, cb: (t: string, html: string) => void) => { cb(t, markup); return "…"; } } }) as Any;
    async.tooltip.formatter({}, "t", (_t: string, html: string) => { later = html; });
    expect(shown(later)).toBe(markup);
    expect(elementsIn(later)).toEqual([]);
  });
  it("escapes once: an option drawn again is not escaped twice", () => {
    const first = textOnly({ tooltip: { formatter: () => "a & b" } }) as Any;
    expect(textOnly(first).tooltip.formatter({})).toBe("a &#38; b");
  });
});

describe("the pages' sources", () => {
  const files = (dir: string): string[] => readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : /\.tsx?$/.test(f) ? [p] : [];
  });
  const src = files(join(__dirname, "..", "src")).filter((f) => !f.endsWith("schema.ts"));
  it("hand options to ECharts in one place only (EChart.tsx, through textOnly) and never write HTML themselves", () => {
    for (const f of src) {
      const text = readFileSync(f, "utf8");
      if (!f.endsWith("EChart.tsx")) expect(text, f).not.toMatch(/\.setOption\(|echarts\.init\(/);
      expect(text, f).not.toMatch(/dangerouslySetInnerHTML|\.innerHTML|outerHTML|insertAdjacentHTML|document\.write/);
    }
    expect(readFileSync(join(__dirname, "..", "src", "charts", "EChart.tsx"), "utf8")).toMatch(/setOption\(textOnly\(/);
  });
});
