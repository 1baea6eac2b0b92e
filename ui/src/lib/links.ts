// Links into the host UI (task instances, the plugin's own pages) and what the address asks for.
import { UI } from "src/api/client";

export interface TaskRef {
  dag_id?: string | null;
  run_id?: string | null;
  task_id?: string | null;
  map_index?: number | null;
}

export function tiHref(dag: string, run: string, task: string, mapIndex?: number | null, ui: string = UI): string {
  const e = encodeURIComponent;
  let p = `${ui}/dags/${e(dag)}/runs/${e(run)}/tasks/${e(task)}`;
  if (mapIndex !== null && mapIndex !== undefined && mapIndex >= 0) p += `/mapped/${mapIndex}`;
  return p;
}

export function refHref(r: TaskRef): string | null {
  return r.dag_id && r.run_id && r.task_id ? tiHref(r.dag_id, r.run_id, r.task_id, r.map_index) : null;
}

export function taskName(r: TaskRef): string {
  if (!r.task_id) return r.dag_id || "(another DAG)";
  return `${r.dag_id} › ${r.task_id}${r.map_index !== null && r.map_index !== undefined && r.map_index >= 0 ? `[${r.map_index}]` : ""}`;
}

export const pluginHref = (route: string, query?: Record<string, string>) =>
  `${UI}/plugin/${route}${query ? `?${new URLSearchParams(query)}` : ""}`;

export interface Mark {
  dag_id: string;
  run_id: string;
  task_id: string;
  map_index: number;
}

/** The task the board's address highlights (the "GPU lease" extra link). */
export function markFromQuery(search: string): Mark | null {
  const q = new URLSearchParams(search);
  const task = q.get("task_id");
  if (!task) return null;
  return { dag_id: q.get("dag_id") ?? "", run_id: q.get("run_id") ?? "", task_id: task, map_index: Number(q.get("map_index") ?? -1) };
}

export function sameTask(a: TaskRef, b: Mark | null): boolean {
  return !!b && a.dag_id === b.dag_id && a.run_id === b.run_id && a.task_id === b.task_id && a.map_index === b.map_index;
}
