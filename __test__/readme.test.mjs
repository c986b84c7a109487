// The README is the product page: short, without commit ids, issue numbers or
// run logs, with Rivet's current Pi API; and its quickstart runs as written.
// The quickstart is the code block after `<!-- readme-test: quickstart -->`,
// read from README.md (never a copy): it is saved as quickstart.mjs in an
// empty app whose node_modules has this package (a link to the checkout, as
// `npm install <folder>` makes it), and run with `node` against the local
// cluster, with the test kubeconfig as its KUBECONFIG.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { getObject, leftovers, namespace, skip } from "./cluster.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const readme = readFileSync(join(root, "README.md"), "utf8");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));

/** The fenced code block right after the marker comment, as written. */
function markedBlock(marker) {
  const blocks = [...readme.matchAll(new RegExp(`^<!-- ${marker} -->\\n\`\`\`(\\w*)\\n([\\s\\S]*?)^\`\`\`$`, "gm"))];
  assert.equal(blocks.length, 1, `one code block marked <!-- ${marker} --> in README.md`);
  return { lang: blocks[0][1], code: blocks[0][2] };
}

/** The README's fenced code blocks whose info string is `lang`. */
const codeBlocks = (lang) => [...readme.matchAll(new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\`$`, "gm"))].map((m) => m[1]);

test("the README is a product page: at most 350 lines, no commit ids, issue numbers or run logs", () => {
  const lines = readme.split("\n");
  assert.ok(lines.length <= 350, `README.md has ${lines.length} lines`);
  // A commit id: 7 to 40 hex digits with at least one letter and one digit, as a word.
  const commits = readme.match(/\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b/g) ?? [];
  assert.deepEqual(commits, [], "commit ids");
  assert.deepEqual(readme.match(/\b(issues?|PR|pull request)\s*#?\d+|(^|\s)#\d+\b/gim) ?? [], [], "issue or PR numbers");
  // Run logs: dated runs, per-run result files other than the current ones
  // (the runtimes benchmark's, and the fake node's `latest`).
  assert.deepEqual(readme.match(/\b20\d\d-\d\d-\d\d\b/g) ?? [], [], "dates of runs");
  assert.deepEqual(readme.match(/bench\/results\/(?!latest\.|runtimes(-quick)?\.)[\w.-]+/g) ?? [], [], "result files of earlier runs");
});

test("the README's Pi snippet is Rivet's current API: pi({ registry, sandbox }) from @rivet-dev/pi", () => {
  const snippets = codeBlocks("js").filter((code) => code.includes("@rivet-dev/pi"));
  assert.equal(snippets.length, 1, "one Pi snippet");
  const [code] = snippets;
  assert.match(code, /^import \{ pi \} from "@rivet-dev\/pi";$/m);
  assert.match(code, /^import \{ createRegistry \} from "@earendil-works\/pi-durable";$/m);
  assert.match(code, /\bpi\(\{\s*registry: \w+,\s*sandbox: agentSandboxProvider\(/);
  assert.doesNotMatch(code, /piDurable\(/, "piDurable is the deprecated alias");
  assert.match(code, new RegExp(`from "${pkg.name}"`));
});

describe("the README's quickstart, extracted from README.md, against the local cluster", { skip, timeout: 300_000 }, () => {
  test("it creates a sandbox, runs a command, writes a file, destroys it, and leaves nothing", async () => {
    const { lang, code } = markedBlock("readme-test: quickstart");
    assert.equal(lang, "js");
    assert.match(code, new RegExp(`from "${pkg.name}"`), "it imports the package by its name");
    // The quickstart names the manifests' namespace; the local cluster applies them as shipped.
    assert.equal(namespace, "agents");

    const app = mkdtempSync(join(tmpdir(), "readme-quickstart-"));
    try {
      writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
      mkdirSync(join(app, "node_modules", "@rivet-dev"), { recursive: true });
      symlinkSync(root, join(app, "node_modules", ...pkg.name.split("/")), "dir");
      writeFileSync(join(app, "quickstart.mjs"), code);

      assert.ok(process.env.KUBECONFIG, "the test kubeconfig (.cluster/env)");
      const { stdout } = await promisify(execFile)(process.execPath, ["quickstart.mjs"], {
        cwd: app,
        env: { ...process.env, KUBECONFIG: process.env.KUBECONFIG },
        timeout: 240_000,
      }).catch((e) => {
        throw new Error(`node quickstart.mjs failed: ${e.message}\n${e.stdout ?? ""}${e.stderr ?? ""}`);
      });

      const created = /^created agents\/(\S+)$/m.exec(stdout);
      assert.ok(created, `created <id> in:\n${stdout}`);
      const hello = /^0 hello from (\S+) in \/workspace$/m.exec(stdout);
      assert.ok(hello, `"0 hello from <pod> in /workspace" in:\n${stdout}`);
      assert.match(stdout, /'notes\.txt'/, "readdir lists the file it wrote");
      assert.match(stdout, new RegExp(`^destroyed agents/${created[1]}$`, "m"));

      // destroy resolved: the claim is gone, and with it the Sandbox and pod it
      // was given (named as the pod's hostname); the garbage collector takes the
      // Service and volume right after.
      assert.equal(getObject("sandboxclaims.extensions.agents.x-k8s.io", created[1]), null, "the claim is gone");
      const pod = hello[1];
      assert.equal(getObject("pods", pod), null, "the pod is gone");
      let left = leftovers(pod);
      for (let i = 0; i < 60 && left.length; i++) {
        await new Promise((resolve) => setTimeout(resolve, 500));
        left = leftovers(pod);
      }
      assert.deepEqual(left, [], "nothing is left behind");
    } finally {
      rmSync(app, { recursive: true, force: true });
    }
  });
});
