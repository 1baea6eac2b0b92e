// The GPU board (Browse > GPU board): every host's GPUs, their leases and measured use, team quotas, who waits
// and why, GPU time by class. A task's "GPU lease" link opens it with that task highlighted.
import { Box, Text } from "@chakra-ui/react";
import { useCallback } from "react";

import { API, useJson } from "src/api/client";
import type { Board, BoardGpu, BoardHost, BoardLease, Quotas, QuotaGroup, TaskLease } from "src/api/types";
import { EChart } from "src/charts/EChart";
import { sparklineOption } from "src/charts/plots";
import type { ChartInk } from "src/charts/theme";
import { A, Card, CutNote, DataTable, ErrorBox, Loading, Muted, Note, Page, Pill, Problems, Section, TaskLink } from "src/components/common";
import { ORANGE, RED, STATE_COLORS, groupColor } from "src/lib/colors";
import { dur, gib, when } from "src/lib/format";
import { type Mark, markFromQuery, pluginHref, sameTask, taskName, tiHref } from "src/lib/links";
import { amount, boardCounts, gpuTileColor, quotaGroups } from "src/lib/board";

function MemoryBar({ gpu }: { gpu: BoardGpu }) {
  const total = gpu.memory_total || 1;
  const leased = gpu.whole_taken ? total : Math.min(gpu.memory_leased, total);
  return (
    <Box title={`${gib(gpu.memory_leased)} leased of ${gib(gpu.memory_total)}`} w="160px" h="10px" bg="bg.emphasized" borderRadius="full">
      <Box w={`${(100 * leased) / total}%`} h="10px" borderRadius="full" bg={leased >= total ? RED : "#2b7bd6"} />
    </Box>
  );
}

function Sparkline({ gpu }: { gpu: BoardGpu }) {
  const m = gpu.measured;
  const option = useCallback((ink: ChartInk) => sparklineOption(m?.series ?? [], m?.memory_total ?? 0, ink), [m]);
  if (!m || m.series.length < 2) return null;
  return (
    <span title="the last minutes: utilisation (blue) and memory in use (orange)" style={{ display: "inline-block", verticalAlign: "middle" }}>
      <EChart option={option} width={120} height={26} testid="gpu-sparkline" label="utilisation and memory in use"
              attrs={{ sparkline: "" }} />
    </span>
  );
}

function MeasuredUse({ gpu }: { gpu: BoardGpu }) {
  const m = gpu.measured;
  if (!m) return <Muted>not sampled</Muted>;
  const others = m.processes.filter((p) => !p.ours && !p.unattributed);
  const over = gpu.leases.filter((l) => l.over_reservation);
  return (
    <Box data-testid="measured" data-utilization={m.utilization ?? ""} data-memory-used={m.memory_used} minW="340px">
      <Box whiteSpace="nowrap">
        <Sparkline gpu={gpu} />{" "}
        <b>{m.utilization === null ? "–" : `${m.utilization}%`}</b>
        {` · ${gib(m.memory_used)} in use${m.temperature !== null ? ` · ${m.temperature} °C` : ""}${m.power_watts !== null ? ` · ${Math.round(m.power_watts)} W` : ""} `}
        {m.simulated ? <Pill text="simulated" color="#c92a2a" title="made-up figures of a simulated GPU, not a real one" /> : null}
        {m.stale ? <Pill text={`${dur(m.age)} old`} title="the host has not sampled lately" /> : null}
      </Box>
      {over.map((l) => (
        <Text key={l.lease_id} data-testid="over-reservation" color={RED}>
          {`${l.task_id ? `${l.task_id}${l.map_index >= 0 ? `[${l.map_index}]` : ""}` : l.dag_id} uses ${gib(l.memory_used)}, more than the ${gib(l.memory)} it reserved`}
        </Text>
      ))}
      {others.length ? (
        <Text data-testid="foreign-processes" color={ORANGE}>
          {`not ours: ${others.map((p) => `pid ${p.pid}${p.user ? ` (${p.user})` : ""}${p.used_memory !== null && p.used_memory !== undefined ? ` ${gib(p.used_memory)}` : ""}`).join(", ")}`}
        </Text>
      ) : null}
    </Box>
  );
}

function LeaseLine({ l, mark, groups }: { l: BoardLease; mark: Mark | null; groups: string[] }) {
  return (
    <Box data-testid="lease" p="0.5" borderRadius="sm" outline={sameTask(l, mark) ? "2px solid #f59f00" : undefined}>
      <Pill text={l.job_class} color={STATE_COLORS[l.job_class]} />
      {l.group ? (
        <span data-testid="lease-group">
          <Pill text={l.group} color={groupColor(l.group, groups)} title={l.quota === "borrowed"
            ? `group ${l.group}: beyond its quota, on GPUs it borrowed (given back when their group needs them)` : `group ${l.group}: within its quota`} />
          {l.quota === "borrowed" ? <Pill text="borrowed" color={ORANGE} title="reclaimable: SIGTERM, its grace period, relaunched later" /> : null}
        </span>
      ) : null}
      <TaskLink r={l} />
      <Muted>{` · since ${new Date(l.started * 1000).toLocaleTimeString()} (${dur(l.seconds)})`}{l.whole ? " · whole GPU" : ` · ${gib(l.memory)}`}
        {l.memory_used !== undefined && l.memory_used !== null ? ` · uses ${gib(l.memory_used)}` : ""}</Muted>
      {l.over_reservation ? <> <Pill text="over its reservation" color={RED} title={`its processes use ${gib(l.memory_used)} of this GPU; it reserved ${gib(l.memory)}`} /></> : null}
      {l.yielding_to ? <> <Pill text="yielding" color={ORANGE} title={`asked to yield to ${l.yielding_to}`} /><Muted>to {l.yielding_to}</Muted></> : null}
    </Box>
  );
}

/** several hosts: one line per host, one square per GPU, so a fleet of 64 GPUs fits on a screen */
function FleetOverview({ hosts }: { hosts: BoardHost[] }) {
  const c = boardCounts(hosts);
  const key: [string, string][] = [["taken whole or full", RED], ["partly leased", "#2b7bd6"], ["held by others' processes", ORANGE], ["free", "rgba(128,128,128,0.3)"]];
  return (
    <Card data-testid="fleet-overview">
      <Box fontWeight="semibold" mb="1.5">
        {`${hosts.length} hosts, ${c.gpus} GPUs, ${c.leased} leased`}
        <Muted ml="3" fontWeight="normal" data-testid="tile-key">
          {key.map(([label, colour]) => (
            <span key={label} style={{ marginRight: 10 }}>
              <span style={{ display: "inline-block", width: 10, height: 10, borderRadius: 2, background: colour, marginRight: 4, verticalAlign: "middle" }} />
              {label}
            </span>
          ))}
        </Muted>
      </Box>
      <DataTable testid="fleet-hosts" head={["host", "GPUs", "leased", "free memory"]} rows={hosts.map((host) => ({ key: host.host, cells: [
        <A key="h" href={`#host-${host.host}`}>{host.host}</A>,
        <Box key="g" lineHeight="0">{host.gpus.map((g) => (
          <a key={g.index} href={`#host-${host.host}`} data-testid="gpu-tile"
             title={`${host.host} GPU ${g.index}: ${gib(g.memory_leased)} of ${gib(g.memory_total)} leased${g.leases.length ? ` (${g.leases.map(taskName).join(", ")})` : ""}`}
             style={{ display: "inline-block", width: 16, height: 16, margin: 1, borderRadius: 3, background: gpuTileColor(g) }} />
        ))}</Box>,
        `${host.gpus.filter((g) => g.leases.length).length} of ${host.gpus.length}`,
        gib(host.gpus.reduce((n, g) => n + (g.memory_free || 0), 0)),
      ] }))} />
    </Card>
  );
}

function QuotaBar({ g, most, color }: { g: QuotaGroup; most: number; color: string }) {
  const pct = (v: number) => `${most > 0 ? (100 * v) / most : 0}%`;
  return (
    <Box data-testid="quota-bar" role="img" aria-label={`${g.group}: ${g.used} used of a quota of ${g.quota}`} position="relative" w="260px" h="16px">
      <Box position="absolute" top="3px" h="10px" w="100%" bg="bg.emphasized" borderRadius="sm" />
      <Box position="absolute" top="3px" h="10px" left="0" w={pct(g.in_quota)} bg={color} borderRadius="sm" />
      <Box position="absolute" top="3px" h="10px" left={pct(g.in_quota)} w={pct(g.borrowed)} bg={color} opacity={0.45} borderRadius="sm" />
      <Box position="absolute" top="0" h="16px" left={pct(g.quota)} w="2px" bg="fg" />
    </Box>
  );
}

function QuotaSection({ quotas }: { quotas: Quotas }) {
  const groups = quotas.groups.map((g) => g.group);
  const most = Math.max(quotas.capacity, ...quotas.groups.map((g) => Math.max(g.used, g.quota)));
  const r = quotas.resource;
  const waiters = quotas.groups.flatMap((g) => g.waiters.map((w) => ({ ...w, group: g.group })));
  return (
    <Section title="Team quotas" data-testid="quotas">
      {/* a broken quota file does not stop the work: the last good version stays in force until it is fixed */}
      <ErrorBox testid="quota-config-error" error={quotas.config_error}
        title="The quota file is broken: the quotas below are its last good version, in force until the file is fixed" />
      <Note>{`${quotas.source} · ${amount(quotas.capacity, r)} ${r === "gpus" ? "GPUs" : ""} in the fleet · solid: within the quota (the mark), pale: borrowed from groups that do not use theirs (given back when they need it)`}</Note>
      <DataTable testid="quota-groups" head={["group", "use", "quota", "used", "within", "borrowed", "lent", "waiting", "weight"]}
        rows={quotas.groups.map((g) => ({ key: g.group, cells: [
          <Pill key="p" text={g.group} color={groupColor(g.group, groups)} />,
          <QuotaBar key="b" g={g} most={most} color={groupColor(g.group, groups)} />,
          amount(g.quota, r) + (g.borrowing_limit !== null ? ` (+${amount(g.borrowing_limit, r)} at most)` : ""),
          amount(g.used, r), amount(g.in_quota, r), amount(g.borrowed, r), amount(g.lent, r),
          g.waiting ? <span key="w" style={{ color: ORANGE }}>{amount(g.waiting, r)}</span> : "0", `${g.weight}`,
        ] }))} />
      {waiters.length ? (
        <Box data-testid="quota-waiting">
          <b>Who waits on whom</b>
          <DataTable testid="quota-waiters" head={["group", "request", "asks for", "on", "waiting", "why"]} rows={waiters.map((w) => ({ cells: [
            <Pill key="p" text={w.group} color={groupColor(w.group, groups)} />, w.owner,
            `${amount(w.amount, r)} ${w.kind === "quota" ? "within its quota" : "to borrow"}`, w.host, dur(w.for_s),
            <span key="y" data-testid="quota-why">{w.reason}</span>,
          ] }))} />
        </Box>
      ) : null}
      {quotas.problems.length ? <ul data-testid="quota-problems">{quotas.problems.map((p, i) => <li key={i} style={{ color: RED }}>{p}</li>)}</ul> : null}
    </Section>
  );
}

/** the task the "GPU lease" link points at: its lease on the board while it runs, else what it published */
function TaskLeasePanel({ mark, board }: { mark: Mark; board: Board }) {
  const running = board.hosts.some((host) => host.gpus.some((g) => g.leases.some((l) => sameTask(l, mark))));
  const e = encodeURIComponent;
  const url = `${API}/dags/${e(mark.dag_id)}/runs/${e(mark.run_id)}/tasks/${e(mark.task_id)}/lease?map_index=${mark.map_index}`;
  const { data, error } = useJson<TaskLease>(running ? null : url, 10000);
  const name = taskName(mark);
  if (running) return <Card highlight data-testid="task-lease">Highlighted below: the lease that <b>{name}</b> holds now.</Card>;
  if (!data) return error ? <Card data-testid="task-lease">{`${name}: ${error}`}</Card> : null;
  const lease = data.lease;
  let body: React.ReactNode;
  if (lease) {
    const gpus = lease.gpus.map((i) => {
      const g = (lease.inventory ?? []).find((x) => x.index === i);
      return `GPU ${i}` + (lease.whole ? " (whole)" : ` (${gib(lease.memory[String(i)])}${g ? ` of ${gib(g.memory_total)})` : ")"}`);
    }).join(", ");
    const ended = data.end_date ? `ended ${when(data.end_date)}` : `task ${data.task_state}`;
    body = <>
      <b>{data.end_date ? "This task's lease has ended. " : `This task is ${data.task_state}; it holds no lease now. `}</b>
      {`It ran on host ${lease.host}, ${gpus}, class ${lease.job_class}, from ${when(lease.started)}; ${ended} (task ${data.task_state}, try ${data.try_number})`}
      {data.gpu_time ? `; ${(data.gpu_time.gpu_seconds / 3600).toFixed(3)} GPU-h used${data.gpu_time.preemptions ? `, ${data.gpu_time.preemptions} preemption(s)` : ""}` : ""}.
    </>;
  } else if (data.wait) {
    body = <><b>This task has not held a lease. </b>{`It waited for GPUs on ${data.wait.host} since ${when(data.wait.since)} (${data.wait.request}): ${data.wait.why}; task ${data.task_state}.`}</>;
  } else {
    body = <><b>This task published no GPU lease</b>{` (task ${data.task_state}${data.hostname ? ` on ${data.hostname}` : ""}).`}</>;
  }
  return (
    <Card highlight data-testid="task-lease">
      <A href={tiHref(mark.dag_id, mark.run_id, mark.task_id, mark.map_index)}>{name}</A>: {body}
      {data.problems.length ? <Note>{data.problems.join("; ")}</Note> : null}
    </Card>
  );
}

function HostCard({ host, mark, groups }: { host: BoardHost; mark: Mark | null; groups: string[] }) {
  return (
    <Card data-testid={`host-${host.host}`} id={`host-${host.host}`}>
      <Box fontWeight="semibold" mb="1.5">
        {`Host ${host.host} `}
        {host.simulated ? <Pill text="simulated" color="#c92a2a" /> : <Pill text="NVML" color="#2f9e44" />}
        {host.fleet ? (
          <span data-testid="host-fleet">
            {host.fleet.up ? <Pill text="fleet: up" color="#2f9e44" title={`published its record ${dur(host.fleet.age)} ago`} />
              : <Pill text="fleet: DOWN" color={RED} title={`no record for ${dur(host.fleet.age)}: its worker or the host is down`} />}
            {host.fleet.foreign_busy.length ? <Pill text={`${host.fleet.foreign_busy.length} GPU(s) held by others`} color={ORANGE}
              title="processes that are not this provider's hold these GPUs: the host takes no work on them" /> : null}
          </span>
        ) : null}
        <Muted fontWeight="normal" data-testid="host-seen">{` ${host.gpus.filter((g) => g.leases.length).length} of ${host.gpus.length} GPU(s) leased · known from ${host.seen}`}</Muted>
      </Box>
      {host.telemetry ? (
        <Note data-testid="telemetry-note">
          {`Measured use: sampled every ${host.telemetry.resolution} s by ${host.telemetry.sampled_by}, the last ${Math.round(host.telemetry.window / 60)} minutes drawn (blue: utilisation, orange: memory in use)`}
          {host.telemetry.error ? <span style={{ color: RED }}>{` · sampling failed: ${host.telemetry.error}`}</span> : null}
        </Note>
      ) : null}
      <DataTable testid="gpus" head={["GPU", "model", "leased memory", "free", "measured use", "leases"]} rows={host.gpus.map((g) => ({ key: g.index, cells: [
        `${g.index}`,
        <span key="m" title={g.uuid}>{g.name + (g.simulated ? " (simulated)" : "")}</span>,
        <Box key="b"><MemoryBar gpu={g} /><Muted>{`${gib(g.memory_leased)} / ${gib(g.memory_total)}${g.whole_taken ? " · whole GPU" : ""}`}</Muted></Box>,
        gib(g.memory_free),
        <MeasuredUse key="u" gpu={g} />,
        g.leases.length === 0
          ? (g.held_by_others ? <span key="o" data-testid="held-by-others" style={{ color: ORANGE }}>held by processes of others</span> : <Muted key="f">free</Muted>)
          : <Box key="l">{g.leases.map((l) => <LeaseLine key={l.lease_id} l={l} mark={mark} groups={groups} />)}</Box>,
      ] }))} />
    </Card>
  );
}

export function GpuBoard() {
  const { data, error } = useJson<Board>(`${API}/gpus`, 5000);
  const mark = markFromQuery(window.location.search);
  if (!data) return <Page title="GPU board"><ErrorBox error={error} />{error ? null : <Loading />}</Page>;
  const anySimulated = data.hosts.some((x) => x.simulated);
  const classes = Object.keys(data.gpu_time.day ?? {}).sort();
  const groups = quotaGroups(data);
  return (
    <Page testid="gpu-board" title={<>GPU board {anySimulated ? <Pill text="SIMULATED GPUs" color="#c92a2a" title="No NVML GPU on these hosts: the inventory is simulated ([gpusched] simulate_gpus)" /> : null}</>}>
      <Note>
        {`GPU hosts and the leases their running tasks published; refreshes every 5 s · updated ${new Date(data.generated * 1000).toLocaleTimeString()} · api-server ${data.api_server_host ?? ""} · `}
        <A href={pluginHref("gpusched-timeline")} data-testid="timeline-link">GPU timeline</A>
      </Note>
      <ErrorBox error={error} />
      {mark ? <TaskLeasePanel mark={mark} board={data} /> : null}
      {data.hosts.length === 0 ? (
        <Card data-testid="no-hosts">No GPU host is known yet: no task published a lease in the last day, and this api-server's host has no GPU (set [gpusched] simulate_gpus on a machine without NVIDIA GPUs).</Card>
      ) : null}
      {data.hosts.length > 1 ? <FleetOverview hosts={data.hosts} /> : null}
      {data.hosts.map((host) => <HostCard key={host.host} host={host} mark={mark} groups={groups} />)}
      {data.quotas ? <QuotaSection quotas={data.quotas} /> : null}
      <Section title={`Waiting for GPUs (${data.waiting.length})`}>
        {data.waiting_shared.length ? <Note data-testid="waiting-shared">All of them see: {data.waiting_shared.join("; ")}</Note> : null}
        {data.waiting.length === 0 ? <Note>Nothing waits for a GPU.</Note> : (
          <DataTable testid="waiting" head={["class", "priority", "task", "asks for", "host", "waiting", "why"]} rows={data.waiting.map((w) => ({ cells: [
            <Pill key="c" text={w.job_class} color={STATE_COLORS[w.job_class]} />, `${w.priority}`, <TaskLink key="t" r={w} />, w.request, w.host,
            dur(data.generated - w.since),
            <Box key="y" title={w.why} data-testid="wait-why"><div>{w.reason}</div>{w.details.map((d, i) => <Note key={i}>{d}</Note>)}</Box>,
          ] }))} />
        )}
      </Section>
      <Section title="GPU time by class">
        {classes.length === 0 ? <Note>No GPU work in the last day.</Note> : (
          <DataTable testid="gpu-time" head={["class", "used, last hour", "lost, last hour", "used, last day", "lost, last day", "preemptions (day)", "running"]}
            rows={classes.map((c) => {
              const hr = data.gpu_time.hour?.[c], d = data.gpu_time.day?.[c];
              const h = (x?: number) => `${((x ?? 0) / 3600).toFixed(2)} GPU-h`;
              return { key: c, cells: [<Pill key="c" text={c} color={STATE_COLORS[c]} />, h(hr?.gpu_seconds), h(hr?.lost_gpu_seconds), h(d?.gpu_seconds),
                h(d?.lost_gpu_seconds), `${d?.preemptions ?? 0}`, `${d?.running ?? 0}`] };
            })} />
        )}
      </Section>
      <CutNote cut={data.cut} />
      <Problems problems={data.problems} />
    </Page>
  );
}

export function GpuSummary() {
  const { data, error } = useJson<Board>(`${API}/gpus`, 10000);
  if (!data) return <Card><ErrorBox error={error} />{error ? null : <Loading what="GPUs: loading…" />}</Card>;
  const c = boardCounts(data.hosts);
  return (
    <Card data-testid="gpu-summary">
      <b>GPUs </b>{data.hosts.some((x) => x.simulated) ? <Pill text="simulated" color="#c92a2a" /> : null}
      <span>{`${c.leased} of ${c.gpus} in use on ${data.hosts.length} host(s) · ${data.waiting.length} task(s) waiting · `}</span>
      <A href={pluginHref("gpusched-gpus")}>GPU board</A>
    </Card>
  );
}
