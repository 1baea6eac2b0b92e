// The page's colour mode (the host UI puts class "dark" on <html>, as Chakra UI's next-themes does) and the chart
// colours that go with it.
import { useEffect, useState } from "react";

export type Mode = "light" | "dark";

export function currentMode(): Mode {
  return typeof document !== "undefined" && document.documentElement.classList.contains("dark") ? "dark" : "light";
}

export function useColorMode(): Mode {
  const [mode, setMode] = useState<Mode>(currentMode);
  useEffect(() => {
    const observer = new MutationObserver(() => setMode(currentMode()));
    observer.observe(document.documentElement, { attributes: true, attributeFilter: ["class", "style"] });
    return () => observer.disconnect();
  }, []);
  return mode;
}

export interface ChartInk {
  text: string;
  muted: string;
  line: string;
  grid: string;
  background: string;
  tooltip: string;
}

export function ink(mode: Mode): ChartInk {
  return mode === "dark"
    ? { text: "#e4e4e7", muted: "#a1a1aa", line: "#71717a", grid: "rgba(255,255,255,0.08)", background: "#18181b", tooltip: "#27272a" }
    : { text: "#27272a", muted: "#52525b", line: "#a1a1aa", grid: "rgba(0,0,0,0.07)", background: "#ffffff", tooltip: "#ffffff" };
}
