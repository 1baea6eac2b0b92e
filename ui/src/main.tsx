// The bundle the Airflow UI imports (airflow_provider_gpusched/plugins/static/gpusched.js): each of the plugin's
// react apps is a component under its name on globalThis (plugins/__init__.py lists them), rendered by the host
// with {dagId, runId, taskId, mapIndex}. Each page renders inside the host's Chakra provider; ChakraProvider here
// gives it the host's own system (globalThis.ChakraUISystem) again, or Chakra's default one on the dev page.
import { ChakraProvider, defaultSystem } from "@chakra-ui/react";
import type { ComponentType, ReactNode } from "react";

import { GpuBoard, GpuSummary } from "src/pages/GpuBoard";
import { GpuTimeline } from "src/pages/GpuTimeline";
import { SlurmJob, type TaskProps } from "src/pages/SlurmJob";
import { Sweeps } from "src/pages/Sweeps";

declare global {
  // eslint-disable-next-line no-var
  var ChakraUISystem: typeof defaultSystem | undefined;
}

export interface PluginProps {
  dagId?: string;
  runId?: string;
  taskId?: string;
  mapIndex?: number | string | null;
}

function Themed({ children }: { children: ReactNode }) {
  return <ChakraProvider value={globalThis.ChakraUISystem ?? defaultSystem}>{children}</ChakraProvider>;
}

export const PAGES: Record<string, ComponentType<PluginProps>> = {
  "GPU board": () => <Themed><GpuBoard /></Themed>,
  "GPU timeline": () => <Themed><GpuTimeline /></Themed>,
  GPUs: () => <Themed><GpuSummary /></Themed>,
  Sweeps: (p) => <Themed><Sweeps dagId={p.dagId ?? ""} /></Themed>,
  "Slurm job": (p) => <Themed><SlurmJob {...(p as TaskProps)} /></Themed>,
};

for (const [name, page] of Object.entries(PAGES)) (globalThis as Record<string, unknown>)[name] = page;
(globalThis as Record<string, unknown>).AirflowPlugin = PAGES["GPU board"];
