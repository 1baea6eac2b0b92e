// The dev page (npm run dev, index.html): one of the pages against a running stack's API (vite.config.ts proxies
// /gpusched/api), chosen by the address: ?page=GPU%20board, ?page=Sweeps&dagId=..., ?page=Slurm%20job&dagId=...&runId=...&taskId=...
// ?dark shows the dark colour mode.
import { createRoot } from "react-dom/client";

import { PAGES, type PluginProps } from "src/main";

const q = new URLSearchParams(window.location.search);
if (q.has("dark")) document.documentElement.classList.add("dark");
const Page = PAGES[q.get("page") ?? "GPU board"] ?? PAGES["GPU board"];
const props: PluginProps = { dagId: q.get("dagId") ?? "", runId: q.get("runId") ?? "", taskId: q.get("taskId") ?? "", mapIndex: q.get("mapIndex") ?? -1 };
const root = document.getElementById("root");
if (root && Page) createRoot(root).render(<Page {...props} />);
