// jsdom has no canvas: the charts draw with ECharts' SVG renderer in the unit tests (the same options), and text is
// measured at 6 px a character (ECharts measures labels on a canvas otherwise).
import { cleanup } from "@testing-library/react";
import { afterEach } from "vitest";

import { drawChartsWithSvg } from "src/charts/EChart";
import { echarts } from "src/charts/echarts";

drawChartsWithSvg();
echarts.setPlatformAPI({ measureText: (text: string) => ({ width: text.length * 6 }) });
afterEach(() => cleanup());
