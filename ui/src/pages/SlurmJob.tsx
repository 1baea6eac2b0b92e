// The "Slurm job" tab of a task instance: the job's state, array tasks, time-limit chain, preemptions, output.
import { Box, NativeSelect, Table } from "@chakra-ui/react";
import { useState } from "react";

import { API, useJson } from "src/api/client";
import type { NoSlurmJob, SlurmJob as Job } from "src/api/types";
import { A, Card, DataTable, ErrorBox, Loading, Note, Page, Pill, Section } from "src/components/common";
import { PHASE_COLORS } from "src/lib/colors";
import { dur, when } from "src/lib/format";
import { pluginHref } from "src/lib/links";

export interface TaskProps {
  dagId: string;
  runId: string;
  taskId: string;
  mapIndex?: number | string | null;
}

export function isNoJob(x: Job | NoSlurmJob): x is NoSlurmJob {
  return "found" in x && x.found === false;
}

function Pre({ children, testid }: { children: string; testid: string }) {
  return (
    <Box as="pre" data-testid={testid} bg="bg.muted" p="2" borderRadius="md" overflowX="auto" fontSize="xs" maxH="420px" whiteSpace="pre-wrap">{children}</Box>
  );
}

export function SlurmJob({ dagId, runId, taskId, mapIndex }: TaskProps) {
  const mi = mapIndex === undefined || mapIndex === null || mapIndex === "" ? -1 : Number(mapIndex);
  const e = encodeURIComponent;
  const { data, error } = useJson<Job | NoSlurmJob>(`${API}/dags/${e(dagId)}/runs/${e(runId)}/tasks/${e(taskId)}/slurm?map_index=${mi}`, 5000);
  const [shown, setShown] = useState<string | null>(null);
  if (!data) return <Page><ErrorBox error={error} />{error ? null : <Loading />}</Page>;
  if (isNoJob(data)) {
    const board = pluginHref("gpusched-gpus", { dag_id: dagId, run_id: runId, task_id: taskId, map_index: String(mi) });
    return (
      <Page title="No Slurm job" testid="slurm-job">
        <Card data-testid="no-slurm-job">
          {data.local_gpus
            ? <>This task ran on local GPUs, not through Slurm. <A href={board}>Its GPU lease</A> on the GPU board says where and when.</>
            : "This task submitted no Slurm job (this tab shows the job of tasks that run through Slurm)."}
        </Card>
      </Page>
    );
  }
  const keys = Object.keys(data.tails);
  const key = shown !== null && keys.includes(shown) ? shown : keys[0];
  const field = (k: string, v: React.ReactNode) => (
    <Table.Row key={k}><Table.ColumnHeader>{k}</Table.ColumnHeader><Table.Cell data-field={k}>{v}</Table.Cell></Table.Row>
  );
  return (
    <Page testid="slurm-job" title={<>{`Slurm job ${data.job_id} `}<Pill text={data.state} color={PHASE_COLORS[data.phase ?? ""]} /></>}>
      <Note>{`${data.source} · refreshes every 5 s · task ${data.task_state ?? ""}`}</Note>
      <ErrorBox error={error} />
      <ErrorBox error={data.problem} />
      <Table.Root size="sm" width="auto" my="2">
        <Table.Body>
          {field("state", data.state + (data.reason && data.reason !== "None" ? ` (${data.reason})` : ""))}
          {field("exit code", data.exit_code === null ? "–" : `${data.exit_code}${data.signal ? ` (signal ${data.signal})` : ""}`)}
          {field("node", data.nodes || "–")}
          {field("partition", data.partition || "–")}
          {field("requeues / preemptions", `${data.requeues}`)}
          {field("elapsed", dur(data.elapsed))}
          {field("submitted", when(data.submitted))}
          {field("cluster", data.via)}
          {field("output", <code>{data.output_path}</code>)}
          {data.array ? field("array", data.array) : null}
        </Table.Body>
      </Table.Root>
      {data.tasks.length ? (
        <Section title={`Array tasks (${data.tasks.length})`}>
          <DataTable testid="array-tasks" head={["task", "state", "exit code", "node", "elapsed", "requeues"]} rows={data.tasks.map((t) => ({ cells: [
            t.task ?? "", <Pill key="s" text={t.state || "?"} color={PHASE_COLORS[(t.state || "").toLowerCase()]} />,
            t.exit_code === null ? "–" : `${t.exit_code}`, t.nodes || "–", dur(t.elapsed), `${t.requeues || 0}`] }))} />
        </Section>
      ) : null}
      {data.segments && data.segments.length ? (
        <Section title={`Time-limit chain: ${data.segments.length} segment(s)`}>
          <DataTable testid="chain-segments" head={["segment", "job", "node", "started", "ended", "outcome", "why it ended"]} rows={data.segments.map((g) => ({ cells: [
            `${g.segment}`, g.job, g.node || "–", when(g.started), g.ended === null ? (g.detail ? "–" : "running") : when(g.ended), g.outcome || "–", g.detail || ""] }))} />
        </Section>
      ) : null}
      {/* a time-limit chain's requeues are its segments ending at the limit, not preemptions (the API says
          `segments`, empty or not, of a chain only) */}
      {data.preemption_events.length ? (
        <Section title={data.segments ? "Requeues" : "Preemptions"} data-testid="requeue-events">
          <ul>{data.preemption_events.map((x, i) => <li key={i}>{x}</li>)}</ul>
        </Section>
      ) : null}
      <Section title={<>Output <Note as="span">{`(${data.tail_source ?? ""})`}</Note></>}>
        {keys.length > 1 ? (
          <NativeSelect.Root size="sm" width="240px">
            <NativeSelect.Field value={key} onChange={(ev) => setShown(ev.target.value)} data-testid="tail-task">
              {keys.map((k) => <option key={k} value={k}>{`array task ${k}`}</option>)}
            </NativeSelect.Field>
            <NativeSelect.Indicator />
          </NativeSelect.Root>
        ) : null}
        {key !== undefined ? <Pre testid="output-tail">{data.tails[key] ?? ""}</Pre> : <Note>No output yet.</Note>}
      </Section>
    </Page>
  );
}
