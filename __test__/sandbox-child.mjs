// A second Node process on the fixture's sandbox, for the tests that need
// one to die (SIGKILL) or to take over from another:
//   node __test__/sandbox-child.mjs exec '<command>'   runs it in $DIR; prints "started" at its first output
//   node __test__/sandbox-child.mjs follow <id> [after] prints one JSON line per chunk, then {"exit":…}
// ACTOR and ID name the sandbox (the fixture's), as the parent connected it.

import { createRequire } from "node:module";
import { wrapSandbox } from "../js/sandbox.js";
import { OPTIONS } from "./sandbox-fixture.mjs";

const native = createRequire(import.meta.url)("../native.cjs");
const provider = new native.NativeProvider(OPTIONS, null);
const sandbox = wrapSandbox(await provider.connect(process.env.ACTOR, process.env.ID));
const [action, arg, after] = process.argv.slice(2);

if (action === "exec") {
  let told = false;
  await sandbox.exec(arg, {
    cwd: process.env.DIR,
    onData: () => {
      if (!told) {
        told = true;
        process.stdout.write("started\n");
      }
    },
  });
} else if (action === "follow") {
  const proc = await sandbox.process(arg);
  const line = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
  const end = await proc.follow({
    after: after === undefined ? undefined : Number(after),
    onOutput: (c) => line({ sequence: c.sequence, stream: c.stream, data: [...c.data] }),
  });
  line({ exit: end });
} else {
  throw new Error(`unknown action ${action}`);
}
