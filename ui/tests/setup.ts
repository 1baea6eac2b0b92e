// jsdom has no canvas: the charts draw with ECharts' SVG renderer in the unit tests (the same options), and text is
// measured at 6 px a character (ECharts measures labels on a canvas otherwise).
import { cleanup, configure } from "@testing-library/react";
import { afterEach } from "vitest";

import { drawChartsWithSvg } from "src/charts/EChart";
import { echarts } from "src/charts/echarts";

drawChartsWithSvg();
echarts.setPlatformAPI({ measureText: (text: string) => ({ width: text.length * 6 }) });
afterEach(() => cleanup());
// a wait (findBy..., waitFor) ends as soon as the state it waits for is there; testing-library's 1 s default to give up
// is a time that holds on a quick machine only (a page's render is 0.1-0.5 s of CPU here, several times that beside
// the suite's other workers): up to 4 s, under vitest's 5 s per test, so that a wait that fails says what it waited for
configure({ asyncUtilTimeout: 4_000 });
