// The GPU timeline (Browse > GPU timeline): who held which GPU over a window, one bar per lease (coloured by job
// class, or by quota group when there are quotas), preemptions and OOM retries marked; a bar links to its task.
import { Box, Button } from "@chakra-ui/react";
import { useCallback, useMemo, useState } from "react";

import { API, useJson } from "src/api/client";
import type { Timeline } from "src/api/types";
import { EChart } from "src/charts/EChart";
import { type ChartInk, ink, useColorMode } from "src/charts/theme";
import { timelineHeight, timelineOption } from "src/charts/timeline";
import { A, Card, CutNote, ErrorBox, Legend, Loading, Note, Page, Problems } from "src/components/common";
import { hoursLabel } from "src/lib/format";
import { pluginHref } from "src/lib/links";
import { barItems, byGroup, layout, timelineKey } from "src/lib/timeline";

export const TIMELINE_WIDTH = 1300;

export function TimelineChart({ data, width = TIMELINE_WIDTH }: { data: Timeline; width?: number }) {
  const { rows, height: units } = useMemo(() => layout(data), [data]);
  const items = useMemo(() => barItems(data, rows), [data, rows]);
  const option = useCallback((ink: ChartInk) => timelineOption(data.since, data.until, items, rows, units, ink), [data, items, rows, units]);
  const counts = items.reduce<Record<string, number>>((m, b) => ({ ...m, [b.outcome]: (m[b.outcome] ?? 0) + 1 }), {});
  return (
    <EChart option={option} width={width} height={timelineHeight(units)} testid="plot-timeline" label="GPU leases over time"
      attrs={{ rows: rows.length, bars: items.length, marks: (counts.preempted ?? 0) + (counts.oom ?? 0) + (counts.stopped ?? 0) }}
      onClick={(p) => {
        const href = (p.data as { href?: string | null } | undefined)?.href;
        if (href) window.location.assign(href);
      }} />
  );
}

export function GpuTimeline() {
  const mode = useColorMode();
  const q = new URLSearchParams(window.location.search);
  const [hours, setHours] = useState(Number(q.get("hours")) || 6);
  const { data, error } = useJson<Timeline>(`${API}/timeline?hours=${hours}`, hours > 6 ? 60000 : 15000);
  const windows = [...new Set([...(data ? data.windows : []), hours])].sort((a, b) => a - b);
  const pick = (
    <Box as="span" data-testid="timeline-window">
      Last{" "}
      {windows.map((x) => (
        <Button key={x} size="2xs" variant={x === hours ? "subtle" : "outline"} mx="0.5" aria-pressed={x === hours} onClick={() => setHours(x)}
                fontWeight={x === hours ? "bold" : "normal"}>
          {hoursLabel(x)}
        </Button>
      ))}
    </Box>
  );
  if (!data) return <Page title="GPU timeline">{pick}<ErrorBox error={error} />{error ? null : <Loading />}</Page>;
  const c = data.counts;
  const leases = Object.values(c).reduce((n, v) => n + v, 0);
  return (
    <Page title="GPU timeline" testid="gpu-timeline">
      <Note>
        {`Who held which GPU: one bar per lease, coloured by ${byGroup(data) ? "quota group" : "job class"}; a bar links to its task instance; scroll on the chart to zoom in time · refreshes every ${hours > 6 ? "minute" : "15 s"} · updated ${new Date(data.until * 1000).toLocaleTimeString()} · `}
        <A href={pluginHref("gpusched-gpus")}>GPU board</A>
      </Note>
      <Box my="2">{pick}</Box>
      <ErrorBox error={error} />
      <Box my="1.5" data-testid="timeline-counts">
        {`${leases} lease(s) in the window: ${c.running ?? 0} running, ${c.succeeded ?? 0} succeeded, ${c.failed ?? 0} failed, ${c.preempted ?? 0} preempted, ${c.oom ?? 0} out of GPU memory, ${c.timeout ?? 0} at their time limit, ${c.stopped ?? 0} stopped`}
      </Box>
      <Legend testid="timeline-key" items={timelineKey(data, ink(mode).text)} />
      {data.rows.length === 0
        ? <Card data-testid="timeline-empty">No lease in this window, and no GPU host is known to this api-server.</Card>
        : <Box overflowX="auto"><TimelineChart data={data} /></Box>}
      {data.dropped ? <Note>{`${data.dropped} older lease(s) of long-running tasks are not kept (each task keeps its newest 2,000).`}</Note> : null}
      <CutNote cut={data.cut} />
      <Problems problems={data.problems} />
    </Page>
  );
}
