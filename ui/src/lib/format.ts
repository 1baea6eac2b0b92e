// How figures are written on the pages.

export function gib(bytes: number | null | undefined): string {
  return bytes ? `${(bytes / 2 ** 30).toFixed(1)} GiB` : "0";
}

export function dur(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

export function when(t: number | null | undefined): string {
  return t ? new Date(t * 1000).toLocaleString() : "–";
}

/** A tick: short ("1e-4", "0.25", "1.2e5"). */
export function fmtTick(v: number): string {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-3) {
    const [m = "", e = ""] = v.toExponential(1).split("e");
    return `${m.replace(/\.0$/, "")}e${e.replace("+", "")}`;
  }
  return `${+v.toPrecision(3)}`;
}

/** A value: 4 significant digits, integers as they are. */
export function fmtValue(v: unknown): string {
  if (typeof v !== "number") return v === null || v === undefined ? "–" : String(v);
  if (Number.isInteger(v)) return `${v}`;
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(3).replace(/\.?0+e/, "e").replace("+", "");
  return `${+v.toPrecision(4)}`;
}

/** A window of hours as the timeline's buttons say it. */
export function hoursLabel(x: number): string {
  return x < 1 ? `${+(x * 60).toFixed(1)} min` : x < 24 ? `${x} h` : `${+(x / 24).toFixed(2)} d`;
}

/** A time of day on the timeline's axis (with the date when the window is longer than a day). */
export function clock(t: number, span: number): string {
  const d = new Date(t * 1000);
  const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: span < 3600 ? "2-digit" : undefined, hour12: false });
  return span > 86400 ? `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${hm}` : hm;
}

export function shorten(text: string, most: number): string {
  return text.length > most ? `${text.slice(0, most - 1)}…` : text;
}
