// One case of hostile.test.mjs in a Node process of its own, so a crash
// (an abort on a failed allocation, say) is seen as this process dying, and
// its memory is its own: connects to the fixture's sandbox ($ACTOR, $ID),
// runs the case named by argv[2] on $DIR, and prints one JSON line
// { code, detail, rssGrowthMiB } (the growth of its peak RSS). PROVIDER_OPTIONS (JSON) is merged into
// the fixture's options.

import { createRequire } from "node:module";
import { wrapSandbox } from "../js/sandbox.js";
import { OPTIONS } from "./sandbox-fixture.mjs";

const native = createRequire(import.meta.url)("../native.cjs");
const extra = JSON.parse(process.env.PROVIDER_OPTIONS ?? "{}");
const provider = new native.NativeProvider({ ...OPTIONS, ...extra }, null);
const sandbox = wrapSandbox(await provider.connect(process.env.ACTOR, process.env.ID));
const dir = process.env.DIR;
const [name, arg] = process.argv.slice(2);

const cases = {
  // readFile of a sparse file the sandbox made, with the largest maxBytes asked.
  readSparse: async () => sandbox.readFile(`${dir}/sparse`, { maxBytes: Number(arg) }),
  // poll of a process whose record and output the sandbox rewrote.
  pollForged: async () => {
    const p = await sandbox.process(arg);
    const r = await p.poll();
    return { chunkBytes: r.chunks.reduce((n, c) => n + c.data.length, 0), exit: r.exit ?? null };
  },
  readdirHuge: async () => (await sandbox.readdir(`${dir}/many`)).length,
  processesHuge: async () => (await sandbox.processes()).length,
};

// Peak RSS (kB), so memory held for a moment and given back still counts.
const before = process.resourceUsage().maxRSS;
let code = "ok";
let detail;
try {
  detail = await cases[name]();
} catch (err) {
  code = err.code ?? "thrown";
  detail = err.message;
}
const rssGrowthMiB = (process.resourceUsage().maxRSS - before) / 1024;
process.stdout.write(`${JSON.stringify({ code, detail, rssGrowthMiB })}\n`);
process.exit(0);
