import { agentSandboxProvider } from "../index.js";
import { readFileSync } from "node:fs";
const t = JSON.parse(readFileSync("/tmp/probe.json", "utf8"));
const p = agentSandboxProvider({ warmPool: t.pool, namespace: t.namespace, ...t.options });
const sb = await p.connect({ actorId: t.actorId, client() {} }, t.id);
await sb.exec("true");
for (const n of [256 << 20, 256 << 20]) {
  let calls = 0, bytes = 0, max = 0;
  const sizes = new Map();
  const c0 = process.cpuUsage(); const t0 = performance.now();
  const r = await sb.exec(`head -c ${n} /dev/zero`, { onData: (c) => { calls++; bytes += c.length; max = Math.max(max, c.length); const k = 2 ** Math.ceil(Math.log2(c.length)); sizes.set(k, (sizes.get(k) ?? 0) + 1); }, maxOutputBytes: 1024 });
  const ms = performance.now() - t0; const cpu = process.cpuUsage(c0);
  console.log({ mbps: bytes / 1e3 / ms, calls, avg: bytes / calls, max, cpuUserMs: cpu.user / 1e3, cpuSysMs: cpu.system / 1e3, ms, sizes: [...sizes].sort((a, b) => a[0] - b[0]), rssMiB: process.memoryUsage().rss / 2 ** 20, ext: process.memoryUsage().external / 2 ** 20, ab: process.memoryUsage().arrayBuffers / 2 ** 20 });
}
