// Where the API and the host UI are, and a hook that reads an answer (refreshed every few seconds).
import { useEffect, useState } from "react";

// The bundle is served at <prefix>/gpusched/static/gpusched.js: the API and the UI share <prefix> (Airflow's
// [api] base_url path). The dev server (index.html) serves it elsewhere: then the API is /gpusched/api, proxied.
export function bases(scriptPath: string): { api: string; ui: string } {
  const m = /^(.*)\/gpusched\/static\/gpusched\.js$/.exec(scriptPath);
  return m ? { api: `${m[1]}/gpusched/api`, ui: m[1] ?? "" } : { api: "/gpusched/api", ui: "" };
}
function scriptPath(): string {
  const current = (document.currentScript as HTMLScriptElement | null)?.src;
  if (current) return new URL(current).pathname;
  const found = [...document.querySelectorAll<HTMLScriptElement>("script[src]")].find((s) => s.src.includes("/gpusched/static/gpusched.js"));
  return found ? new URL(found.src).pathname : "";
}
/** The Airflow UI imports the bundle (no script element, no currentScript): its page's <base href> is the UI's own
 * path ([api] base_url's), which is also where the plugin's app is mounted (<base>/gpusched). */
function bundlePath(): string {
  const own = scriptPath();
  if (own) return own;
  if (document.querySelector("base[href]")) return `${new URL(document.baseURI).pathname.replace(/\/$/, "")}/gpusched/static/gpusched.js`;
  return "";
}
export const BASES = typeof document === "undefined" ? { api: "/gpusched/api", ui: "" } : bases(bundlePath());
export const API = BASES.api;
export const UI = BASES.ui;

export interface Answer<T> {
  data: T | null;
  error: string | null;
}

export function useJson<T>(url: string | null, everyMs = 0): Answer<T> {
  const [state, setState] = useState<Answer<T>>({ data: null, error: null });
  useEffect(() => {
    if (!url) return undefined;
    let alive = true;
    let last = "";  // an answer the same as the last one changes nothing (the plots are not drawn again)
    const load = async () => {
      try {
        const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
        const text = await r.text();
        if (r.ok && text === last) {
          if (alive) setState((s) => (s.error ? { data: s.data, error: null } : s));
          return;
        }
        let body: unknown = {};
        try {
          body = JSON.parse(text);
        } catch {
          if (r.ok) throw new Error(`the answer of ${url} is not JSON`);
        }
        if (!r.ok) {
          const detail = body && typeof body === "object" && "detail" in body ? String((body as { detail: unknown }).detail) : "";
          throw new Error(`${r.status} ${r.statusText}: ${detail}`);
        }
        last = text;
        if (alive) setState({ data: body as T, error: null });
      } catch (e) {
        if (alive) setState((s) => ({ data: s.data, error: e instanceof Error ? e.message : String(e) }));
      }
    };
    void load();
    const timer = everyMs ? setInterval(() => void load(), everyMs) : null;
    return () => {
      alive = false;
      if (timer) clearInterval(timer);
    };
  }, [url, everyMs]);
  return state;
}
