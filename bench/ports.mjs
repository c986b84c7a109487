// npm run bench -- --ports   (or: node bench/ports.mjs [--quick] [--runtimes=runc,gvisor])
//
// Ports (issue 20): a node server started with spawn in one sandbox, reached
// through this package (sandbox.fetch, sandbox.forward) and through
// `kubectl port-forward` + curl in the same run, alternated per repetition:
//   - one 64 MiB body: sandbox.fetch (read as a web stream), curl through
//     sandbox.forward, curl through kubectl port-forward;
//   - 100 small requests, each on its own connection (so each its own
//     tunnel), by one Node client through sandbox.forward and through
//     kubectl port-forward.
// With --runtimes, once per runtime: runc (namespace agents) and gVisor
// (agents-gvisor, where the node cannot forward: the package goes through
// its exec relay, and kubectl port-forward cannot connect at all).
// Writes bench/results/ports.{json,md}, with --runtimes
// bench/results/ports-runtimes.{json,md}.

import { execFile, spawn } from "node:child_process";
import http from "node:http";
import { mkdirSync, writeFileSync } from "node:fs";
import { promisify } from "node:util";
import { ensureCluster } from "./lib/cluster.mjs";
import { MiB, percentile, round } from "./lib/stats.mjs";

const REPS = process.argv.includes("--quick") ? 1 : 3;
const BIG = 64 * MiB;
const SMALL_N = 100;
const PORT = 30000 + (process.pid % 20000);
const SERVER = `
const http = require("node:http");
const block = Buffer.alloc(1 << 20, 7);
http.createServer((req, res) => {
  if (req.url !== "/big") return res.end("ok");
  res.writeHead(200, { "content-length": ${BIG} });
  let sent = 0;
  const more = () => {
    while (sent < ${BIG}) { sent += block.length; if (!res.write(block)) return res.once("drain", more); }
    res.end();
  };
  more();
}).listen(Number(process.argv[1]), "127.0.0.1");
`;

ensureCluster();
const { agentSandboxProvider } = await import("../index.js");
const execFileP = promisify(execFile);
const kubectl = process.env.SANDBOX_TEST_KUBECTL || "kubectl";
const log = (...a) => console.error("[bench ports]", ...a);
const runtimesArg = process.argv.find((a) => a.startsWith("--runtimes="));
/** Runtime name → its sandbox namespace (dev/cluster/cluster.sh). */
const NAMESPACES = { runc: "agents", gvisor: process.env.SANDBOX_TEST_GVISOR_NAMESPACE || "agents-gvisor" };
const runtimes = runtimesArg ? runtimesArg.slice("--runtimes=".length).split(",") : ["runc"];
for (const r of runtimes) if (!NAMESPACES[r]) throw new Error(`--runtimes: unknown runtime ${r} (runc, gvisor)`);

/** `curl` of /big through a local port: ms. */
async function curlBig(port) {
  const t0 = performance.now();
  const { stdout } = await execFileP("curl", ["-sS", "-o", "/dev/null", "-w", "%{size_download}", `http://127.0.0.1:${port}/big`]);
  if (Number(stdout) !== BIG) throw new Error(`curl got ${stdout} bytes`);
  return performance.now() - t0;
}

/** SMALL_N sequential requests, each on a new connection: per-request ms. */
async function small(port) {
  const times = [];
  for (let i = 0; i < SMALL_N; i++) {
    const t0 = performance.now();
    await new Promise((resolve, reject) =>
      http.get(`http://127.0.0.1:${port}/`, { agent: false }, (res) => res.resume().on("end", resolve).on("error", reject)).on("error", reject),
    );
    times.push(performance.now() - t0);
  }
  return times;
}

/** kubectl port-forward to a free local port; resolves once it forwards. */
async function kubectlForward(namespace, pod) {
  const child = spawn(kubectl, ["port-forward", "-n", namespace, `pod/${pod}`, `:${PORT}`], { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => {
      const m = /127\.0\.0\.1:(\d+)/.exec(String(d));
      if (m) resolve(Number(m[1]));
    });
    child.on("exit", (code) => reject(new Error(`kubectl port-forward exited ${code}`)));
  });
  return { port, close: () => child.kill() };
}

/** Every measurement in one sandbox of `namespace`: the medians, by row. */
async function measure(namespace) {
  const p = agentSandboxProvider({ namespace, warmPool: "pool-ephemeral", suspend: "none", cwd: "/tmp" });
  const ctx = { actorId: `bench-ports-${Date.now().toString(36)}`, client() {} };
  const id = await p.create(ctx);
  const sandbox = await p.connect(ctx, id);
  // The claim's Sandbox names the pod.
  const claim = id.split("/")[1];
  const pod = (await execFileP(kubectl, ["get", "-n", namespace, "sandboxclaims.extensions.agents.x-k8s.io", claim, "-o", "jsonpath={.status.sandbox.name}"])).stdout.trim();
  const rows = {};
  const add = (key, value) => (rows[key] ??= []).push(value);
  // kubectl port-forward cannot reach a gVisor sandbox's network: its rows stay empty there.
  const kubectlWorks = namespace === NAMESPACES.runc;
  try {
    await sandbox.spawn(`exec node -e '${SERVER}' ${PORT}`);
    while (!(await sandbox.listeningPorts()).some((x) => x.port === PORT)) await new Promise((r) => setTimeout(r, 100));
    for (let rep = 0; rep < REPS; rep++) {
      log(`repetition ${rep + 1}/${REPS}`);
      // sandbox.fetch of the big body, as a web stream.
      global.gc?.();
      const rss0 = process.memoryUsage().rss;
      let peak = rss0;
      let t0 = performance.now();
      const r = await sandbox.fetch(PORT, "/big");
      let n = 0;
      for await (const chunk of r.body) {
        n += chunk.length;
        peak = Math.max(peak, process.memoryUsage().rss);
      }
      if (n !== BIG) throw new Error(`fetch got ${n} bytes`);
      add("fetch-64MiB package fetch ms", performance.now() - t0);
      add("fetch-64MiB package fetch rss MiB", (peak - rss0) / MiB);

      const f = await sandbox.forward(PORT);
      const kf = kubectlWorks ? await kubectlForward(namespace, pod) : undefined;
      try {
        add("fetch-64MiB package forward+curl ms", await curlBig(f.localPort));
        if (kf) add("fetch-64MiB kubectl port-forward+curl ms", await curlBig(kf.port));
        t0 = performance.now();
        const mine = await small(f.localPort);
        add("small-100 package forward total ms", performance.now() - t0);
        add("small-100 package forward p50 ms", percentile(mine, 50));
        if (kf) {
          t0 = performance.now();
          const theirs = await small(kf.port);
          add("small-100 kubectl port-forward total ms", performance.now() - t0);
          add("small-100 kubectl port-forward p50 ms", percentile(theirs, 50));
        }
      } finally {
        kf?.close();
        await f.close();
      }
    }
  } finally {
    await p.destroy(ctx, id);
  }
  return { rows, medians: Object.fromEntries(Object.entries(rows).map(([k, v]) => [k, percentile(v, 50)])) };
}

const mbs = (ms) => (ms === undefined ? "—" : `${round(BIG / MiB / (ms / 1000), 1)} MiB/s`);
const ratio = (a, b) => (a === undefined || b === undefined ? "—" : round(a / b, 2));
const results = {};
for (const runtime of runtimes) {
  log(`runtime ${runtime} (namespace ${NAMESPACES[runtime]})`);
  results[runtime] = await measure(NAMESPACES[runtime]);
}
/** One runtime's table. */
function table(m) {
  const smallRow = (who) =>
    m[`small-100 ${who} total ms`] === undefined
      ? "— (cannot connect)"
      : `${round(m[`small-100 ${who} total ms`], 0)} ms (p50 ${round(m[`small-100 ${who} p50 ms`], 1)} ms)`;
  return [
    "| Measurement | package | kubectl port-forward + curl | ratio (kubectl / package) |",
    "|---|---|---|---|",
    `| 64 MiB body, sandbox.fetch (web stream) | ${mbs(m["fetch-64MiB package fetch ms"])}, RSS +${round(m["fetch-64MiB package fetch rss MiB"], 1)} MiB | ${mbs(m["fetch-64MiB kubectl port-forward+curl ms"])} | ${ratio(m["fetch-64MiB kubectl port-forward+curl ms"], m["fetch-64MiB package fetch ms"])} |`,
    `| 64 MiB body, curl through sandbox.forward | ${mbs(m["fetch-64MiB package forward+curl ms"])} | ${mbs(m["fetch-64MiB kubectl port-forward+curl ms"])} | ${ratio(m["fetch-64MiB kubectl port-forward+curl ms"], m["fetch-64MiB package forward+curl ms"])} |`,
    `| 100 small requests through forward, one connection each | ${smallRow("package forward")} | ${smallRow("kubectl port-forward")} | ${ratio(m["small-100 kubectl port-forward total ms"], m["small-100 package forward total ms"])} |`,
  ];
}
const md = [`# Ports (${new Date().toISOString()}, ${REPS} repetitions, medians)`, ""];
for (const runtime of runtimes) {
  if (runtimesArg) md.push(`## ${runtime === "gvisor" ? "gVisor (the package's exec relay)" : "runc (pods/portforward)"}`, "");
  md.push(...table(results[runtime].medians), "");
}
const name = runtimesArg ? "ports-runtimes" : "ports";
mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
writeFileSync(new URL(`./results/${name}.json`, import.meta.url), JSON.stringify(runtimesArg ? results : results.runc, null, 1) + "\n");
writeFileSync(new URL(`./results/${name}.md`, import.meta.url), md.join("\n"));
process.stdout.write(md.join("\n"));
process.exit(0);
