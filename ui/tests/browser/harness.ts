// A page for the committed bundle in a real browser without Airflow (tests/ui/test_browser.py builds this file with
// esbuild and serves it with the bundle): it sets the globals the Airflow UI gives a plugin (React, its JSX runtime,
// Chakra UI, Emotion), answers the plugin API from tests/hostile.ts, loads /gpusched/static/gpusched.js as the UI
// does and renders the page that ?page= names with hostile props. It records every element that markup made
// anywhere in the document (window.__markup) and every text a chart's tooltip showed (window.__tooltips).
import * as ChakraUI from "@chakra-ui/react";
import * as EmotionReact from "@emotion/react";
import * as React from "react";
import * as ReactDOM from "react-dom";
import { createRoot } from "react-dom/client";
import * as ReactJSXRuntime from "react/jsx-runtime";

import { DAG, bad, routes } from "../hostile";

declare global {
  interface Window {
    __markup: string[];
    __tooltips: string[];
    __ready: boolean;
  }
}

Object.assign(globalThis, { React, ReactDOM, ReactJSXRuntime, ChakraUI, EmotionReact });
window.__markup = [];
window.__tooltips = [];

const answers = routes();
const keys = Object.keys(answers).sort((a, b) => b.length - a.length);
globalThis.fetch = async (input: RequestInfo | URL) => {
  const path = new URL(String(input), window.location.href).pathname;
  const key = keys.find((k) => path.endsWith(k));
  return key ? new Response(JSON.stringify(answers[key]), { status: 200, headers: { "Content-Type": "application/json" } })
    : new Response(JSON.stringify({ detail: "no such page" }), { status: 404, statusText: "Not Found" });
};

const DANGEROUS = "img, script:not([src]), iframe, object, embed, svg[onload], [onerror], [onload]";
new MutationObserver((mutations) => {
  for (const m of mutations) {
    for (const node of m.addedNodes) {
      if (!(node instanceof Element)) continue;
      for (const el of [node, ...node.querySelectorAll("*")]) if (el.matches(DANGEROUS)) window.__markup.push(el.outerHTML);
    }
    const target = m.target instanceof Element ? m.target : m.target.parentElement;
    const tip = target?.closest<HTMLElement>("div[style*='z-index: 9999999']");
    if (tip && tip.textContent) window.__tooltips.push(tip.textContent);
  }
}).observe(document.documentElement, { childList: true, subtree: true, characterData: true });

const page = new URLSearchParams(window.location.search).get("page") ?? "GPU board";
const script = document.createElement("script");
script.src = "/gpusched/static/gpusched.js";
script.onload = () => {
  const Page = (globalThis as unknown as Record<string, React.ComponentType<Record<string, unknown>>>)[page];
  if (!Page) throw new Error(`the bundle has no page ${page}`);
  createRoot(document.getElementById("root") as HTMLElement)
    .render(React.createElement(Page, { dagId: DAG, runId: bad("run1"), taskId: bad("t"), mapIndex: -1 }));
  window.__ready = true;
};
document.head.appendChild(script);
