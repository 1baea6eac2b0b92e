// One colour per meaning, on every page.

export const STATE_COLORS: Record<string, string> = {
  idle: "#8e6ccf", normal: "#2b7bd6", high: "#d9822b", succeeded: "#2f9e44", failed: "#e03131",
  invalid: "#c2255c", timeout: "#9c36b5", running: "#1c7ed6", waiting: "#868e96", skipped: "#74b816", defined: "#495057",
  pruned: "#f08c00", stopped: "#495057", not_started: "#adb5bd",
};
export const PHASE_COLORS: Record<string, string> = {
  succeeded: "#2f9e44", completed: "#2f9e44", requeued: "#d9480f", running: "#1c7ed6", pending: "#868e96", failed: "#e03131",
  timeout: "#e8590c", cancelled: "#495057", preempted: "#d9480f", out_of_memory: "#c2255c", node_fail: "#c92a2a",
};
export const BEST = "#f59f00";
export const TRIAL = "#2b7bd6";
export const RED = "#e03131";
export const ORANGE = "#d9480f";
export const GREY = "#868e96";

// a quota group has one colour on every page: its place among the group names sorted
const GROUP_COLORS = ["#7048e8", "#e8590c", "#2f9e44", "#c2255c", "#f08c00", "#0c8599", "#5c940d", "#862e9c"];
export const NO_GROUP = "#adb5bd";
export function groupColor(name: string, groups: readonly string[]): string {
  const sorted = [...groups].sort();
  const i = sorted.indexOf(name);
  return GROUP_COLORS[(i < 0 ? sorted.length : i) % GROUP_COLORS.length] as string;
}

const BASE_CLASSES = ["idle", "normal", "high"];
const EXTRA_CLASS_COLORS = ["#0c8599", "#e64980", "#5c940d", "#862e9c", "#a61e4d", "#364fc7"];
export function classColor(name: string, classes: readonly string[]): string {
  if (BASE_CLASSES.includes(name)) return STATE_COLORS[name] as string;
  const others = classes.filter((c) => !BASE_CLASSES.includes(c));
  return EXTRA_CLASS_COLORS[Math.max(0, others.indexOf(name)) % EXTRA_CLASS_COLORS.length] as string;
}

export const ROUND_COLORS = ["#2b7bd6", "#2f9e44", "#8e6ccf", "#d9480f", "#0c8599", "#e64980", "#5c940d", "#495057"];
export function roundColor(round: number | null | undefined): string {
  return ROUND_COLORS[(round ?? 0) % ROUND_COLORS.length] as string;
}
export const memberColor = roundColor;

/** Earlier trials light, later ones dark (as Optuna's slice plots colour by trial number). */
export function trialColor(index: number, last: number): string {
  const f = last > 0 ? Math.min(1, Math.max(0, index / last)) : 1;
  return `hsl(${210 - 20 * f}, 70%, ${78 - 45 * f}%)`;
}

/** A score's colour in the parallel coordinates: worst pale yellow, best deep blue. */
export function scoreColor(f: number): string {
  return `hsl(${55 + 170 * f}, ${60 + 20 * f}%, ${62 - 30 * f}%)`;
}

/** The outcomes marked on the timeline: colour and what it means. */
export const MARKS: Record<string, [string, string]> = {
  preempted: ["#e03131", "preempted (gave its GPU back)"],
  oom: ["#c2255c", "GPU out of memory (retried bigger)"],
  failed: ["#212529", "failed"],
  timeout: ["#9c36b5", "stopped at its time limit"],
  stopped: ["#f59f00", "stopped"],
};
