// One measurement of one alternative in a fresh Node process, so RSS and
// event-loop figures belong to that alternative alone.
//   node --expose-gc bench/worker.mjs '{"alt":"package","op":"stream","params":{...},"target":{...}}'
// Prints `RESULT <json>` as its last line.

import { performance } from "node:perf_hooks";
import { concurrent, idleEld, measured, sequential, summarize, testData } from "./lib/measure.mjs";

const { alt: name, op, params, target } = JSON.parse(process.argv[2]);
const alt = await (await import(`./alt/${name}.mjs`)).open(target);
const helper = alt.helper ?? {}; // kubectl: its own CPU time and RSS growth
for (let i = 0; i < 3; i++) await alt.exec("true"); // warm-up: TLS, auth, JIT

/** A transfer that lost or invented bytes is a failure, not a figure. */
function checked(m, bytes) {
  if (bytes !== params.bytes) throw new Error(`${name} ${op}: ${bytes} bytes instead of ${params.bytes}`);
  return { ...m, bytes, result: undefined };
}

async function main() {
  switch (op) {
    case "exec-seq":
      return sequential(params.n, () => alt.exec("true"));
    case "exec-conc":
      return concurrent(params.n, () => alt.exec("true"));
    case "exec-reattach-seq":
      return sequential(params.n, () => alt.execReattach("true"));
    case "spawn-first-output":
      return sequential(params.n, () => alt.spawnFirstOutput());
    case "spawn-polled":
      return sequential(params.n, () => alt.spawnPolled());
    case "stream": {
      const idleEldP99Ms = await idleEld();
      let bytes = 0;
      const m = await measured(() => alt.stream(params.bytes, (c) => (bytes += c.length)), helper);
      return { ...checked(m, bytes), idleEldP99Ms };
    }
    case "write": {
      const data = testData(params.bytes);
      const input = (await alt.prepareWrite?.(data)) ?? data;
      const m = await measured(() => alt.writeFile(params.path, input), helper);
      return checked(m, Number((await alt.exec(`wc -c < '${params.path}'`)).trim()));
    }
    case "read": {
      const m = await measured(() => alt.readFile(params.path), helper);
      return checked(m, m.result.length);
    }
    case "read-range": {
      // Sparse: what is measured is the transfer, not the disk.
      await alt.exec(`truncate -s ${params.bytes} ${params.path}`);
      const range = await sequential(params.n, async () => {
        const page = await alt.readRange(params.path, params.bytes - 4096, 4096);
        if (page.length !== 4096) throw new Error(`ranged read: ${page.length} bytes`);
      });
      const whole = await measured(() => alt.readFile(params.path), helper);
      checked(whole, whole.result.length);
      await alt.exec(`rm -f ${params.path}`);
      return { ...range, wholeMs: whole.ms, wholeCpuMs: whole.cpuMs };
    }
    case "claim-exec": {
      // create → first exec, one after another, on warm pool target.pool; the
      // claims are left for the harness to delete.
      await alt.prepareClaims?.();
      const ms = [];
      const claims = [];
      for (let i = 0; i < params.n; i++) {
        const t = performance.now();
        claims.push(await alt.claimExec(`${params.prefix}-${i}`));
        ms.push(performance.now() - t);
      }
      return { ...summarize({ ms }), claims };
    }
    case "usage":
      return sequential(params.n, () => alt.usage());
    case "terminal-echo": {
      const term = await alt.terminal();
      for (let i = 0; i < 3; i++) await term.key(); // warm-up
      const m = await sequential(params.n, () => term.key());
      await term.close();
      return m;
    }
    default:
      throw new Error(`unknown op ${op}`);
  }
}

const out = await main();
await alt.close?.();
process.stdout.write(`RESULT ${JSON.stringify(out)}\n`);
process.exit(0);
