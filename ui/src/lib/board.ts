// What the GPU board computes from its answer.
import type { Board, BoardGpu, BoardHost } from "src/api/types";
import { ORANGE, RED } from "src/lib/colors";
import { gib } from "src/lib/format";

export function boardCounts(hosts: BoardHost[]): { gpus: number; leased: number } {
  const gpus = hosts.flatMap((h) => h.gpus);
  return { gpus: gpus.length, leased: gpus.filter((g) => g.leases.length).length };
}

/** a GPU's square on the fleet overview: red taken whole or full, blue partly leased, orange held by others, grey free */
export function gpuTileColor(g: BoardGpu): string {
  const total = g.memory_total || 1;
  const leased = g.whole_taken ? total : Math.min(g.memory_leased, total);
  return g.held_by_others ? ORANGE : leased >= total ? RED : leased > 0 ? "#2b7bd6" : "rgba(128,128,128,0.3)";
}

export function quotaGroups(board: Board): string[] {
  return board.quotas ? board.quotas.groups.map((g) => g.group) : [];
}

export function amount(v: number | null | undefined, resource: string): string {
  if (v === null || v === undefined) return "–";
  return resource === "gpu_memory" ? gib(v) : `${+v.toFixed(2)}`;
}
