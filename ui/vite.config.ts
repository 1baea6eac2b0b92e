// The UI bundle (npm run build): one file, airflow_provider_gpusched/plugins/static/gpusched.js, that the Airflow UI
// imports for each of the plugin's react apps. As Airflow's React plugin template builds one (dev/react-plugin-tools
// in apache/airflow): the host UI's React, JSX runtime and Chakra UI are not bundled but taken from the globals the
// host sets (React, ReactJSXRuntime, ChakraUI, EmotionReact: Airflow 3.2+), so the pages render inside the host's
// own Chakra provider, theme and colour mode. `npm run dev` serves index.html against a running stack (docs/development.md).
import react from "@vitejs/plugin-react";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const here = dirname(fileURLToPath(import.meta.url));

const HOST_GLOBALS: Record<string, string> = {
  react: "React",
  "react-dom": "ReactDOM",
  "react/jsx-runtime": "ReactJSXRuntime",
  "@chakra-ui/react": "ChakraUI",
  "@emotion/react": "EmotionReact",
};

export default defineConfig(({ command }) => ({
  base: "./",
  plugins: [react()],
  resolve: { alias: { src: resolve(here, "src") } },
  define: command === "build" ? { "process.env.NODE_ENV": JSON.stringify("production") } : {},
  build: {
    outDir: resolve(here, "..", "airflow_provider_gpusched", "plugins", "static"),
    emptyOutDir: false,
    chunkSizeWarningLimit: 1200,
    sourcemap: false,
    lib: {
      entry: resolve(here, "src", "main.tsx"),
      formats: ["iife"],
      name: "GpuschedPlugin",
      fileName: () => "gpusched.js",
    },
    rollupOptions: {
      external: Object.keys(HOST_GLOBALS),
      output: { globals: HOST_GLOBALS },
    },
  },
  server: {
    // the dev page's API calls go to a running stack (GPUSCHED_STACK, default the local stack's api-server)
    // with the bearer token GPUSCHED_TOKEN (POST /auth/token on the stack), as the API asks of any client
    proxy: {
      "/gpusched/api": {
        target: process.env.GPUSCHED_STACK || "http://127.0.0.1:28080",
        changeOrigin: true,
        headers: (process.env.GPUSCHED_TOKEN ? { Authorization: `Bearer ${process.env.GPUSCHED_TOKEN}` } : {}) as Record<string, string>,
      },
    },
  },
  test: {
    environment: "jsdom",
    globals: true,
    include: ["tests/**/*.test.{ts,tsx}"],
    setupFiles: ["./tests/setup.ts"],
    restoreMocks: true,
    // each test file in a fresh VM context on a worker thread, not a forked Node process: the same isolation, about
    // 2 s less CPU of the fast tier's budget (vitest 3: 5.2 s of CPU instead of 7-8)
    pool: "vmThreads",
  },
}));
