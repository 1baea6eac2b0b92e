// ECharts, only the parts the pages use (tree-shaken: bench/ui_charts.py and docs/benchmarks.md say why ECharts).
import { BarChart, CustomChart, LineChart, ParallelChart, ScatterChart } from "echarts/charts";
import {
  DataZoomComponent, GridComponent, MarkLineComponent, ParallelComponent, TooltipComponent,
} from "echarts/components";
import * as echarts from "echarts/core";
import { CanvasRenderer, SVGRenderer } from "echarts/renderers";

echarts.use([
  BarChart, CustomChart, LineChart, ParallelChart, ScatterChart,
  DataZoomComponent, GridComponent, MarkLineComponent, ParallelComponent, TooltipComponent,
  CanvasRenderer, SVGRenderer,
]);

export { echarts };
export type EChartsOption = echarts.EChartsCoreOption;
export type ECharts = echarts.ECharts;
