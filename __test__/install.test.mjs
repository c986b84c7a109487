// Installed as a user would: `npm pack` of the root package (prepublished as
// the release does it, so it names its platform packages) and the
// linux-x64-gnu platform package (with the addon this checkout built), and
// of a stand-in @rivet-dev/sandbox-adapter that exposes `./kubernetes`;
// `npm install <tarballs>` into an empty folder (no Rust, no repo); then
// `import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter/kubernetes"`
// type-checks against the adapter's SandboxProvider and runs connect + exec
// against the local cluster.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { namespace, skip } from "./cluster.mjs";
import { prepublishedCopy } from "./prepublish.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const pkg = JSON.parse(readFileSync(`${root}package.json`, "utf8"));
// The newer of the release build (scripts/release-build.sh, glibc 2.17
// floor) and the addon this checkout built: an old release build must not
// stand in for the code under test.
const released = `${root}npm/linux-x64-gnu/${pkg.napi.binaryName}.linux-x64-gnu.node`;
const built = `${root}${pkg.napi.binaryName}.linux-x64-gnu.node`;
const addon = existsSync(released) && (!existsSync(built) || statSync(released).mtimeMs > statSync(built).mtimeMs) ? released : built;
/** Runs a command; a failure's message carries its output. */
function run(cmd, args, cwd) {
  try {
    return execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    throw new Error(`${cmd} ${args.join(" ")} failed:\n${e.stdout ?? ""}${e.stderr ?? ""}`);
  }
}

describe("installed from tarballs into an empty project", { skip: skip ?? (existsSync(addon) ? undefined : "no addon built"), timeout: 300_000 }, () => {
  /** The scratch folder (removed afterwards) and the app inside it. */
  let base;
  let dir;
  before(() => {
    base = mkdtempSync(join(tmpdir(), "install-test-"));
    const packs = join(base, "packs");
    mkdirSync(packs);
    // The platform package as the release would publish it: its folder plus the addon.
    const platform = join(base, "linux-x64-gnu");
    cpSync(`${root}npm/linux-x64-gnu`, platform, { recursive: true });
    cpSync(addon, join(platform, `${pkg.napi.binaryName}.linux-x64-gnu.node`));
    // The root package as the release publishes it (with its optional dependencies).
    const published = prepublishedCopy();
    const tarballs = [published, platform, `${root}__test__/stand-in-sandbox-adapter`].map((folder) =>
      join(packs, run("npm", ["pack", "--silent", "--pack-destination", packs], folder).trim().split("\n").pop()),
    );
    dir = join(base, "app");
    mkdirSync(dir);
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    run("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", ...tarballs], dir);
    rmSync(published, { recursive: true, force: true });
  });
  after(() => base && rmSync(base, { recursive: true, force: true }));

  test("only the packages it needs are installed, the addon from the platform package", () => {
    const lock = JSON.parse(readFileSync(join(dir, "package-lock.json"), "utf8"));
    const installed = Object.keys(lock.packages).filter((p) => p).sort();
    assert.deepEqual(installed, [
      "node_modules/@rivet-dev/sandbox-adapter",
      `node_modules/${pkg.name}`,
      `node_modules/${pkg.name}-linux-x64-gnu`,
    ]);
    assert.ok(!existsSync(join(dir, "node_modules", pkg.name, `${pkg.napi.binaryName}.linux-x64-gnu.node`)));
  });

  test("the adapter's ./kubernetes entry type-checks against its SandboxProvider", () => {
    writeFileSync(
      join(dir, "check.ts"),
      `import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter/kubernetes";
       import type { SandboxProvider } from "@rivet-dev/sandbox-adapter";
       const p: SandboxProvider = agentSandboxProvider({ warmPool: "p" });
       void p;\n`,
    );
    writeFileSync(
      join(dir, "tsconfig.json"),
      // A Node project has @types/node (index.d.ts references it for Buffer).
      JSON.stringify({
        compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true, typeRoots: [`${root}node_modules/@types`], types: ["node"] },
        files: ["check.ts"],
      }),
    );
    run(process.execPath, [`${root}node_modules/typescript/bin/tsc`, "-p", "tsconfig.json"], dir);
  });

  test("connect and exec through the adapter's entry point against the local cluster", () => {
    writeFileSync(
      join(dir, "main.mjs"),
      `import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter/kubernetes";
       const p = agentSandboxProvider({ namespace: ${JSON.stringify(namespace)}, warmPool: "pool-ephemeral", suspend: "none", cwd: "/tmp" });
       const ctx = { actorId: "install-test-" + process.pid };
       const id = await p.create(ctx);
       try {
         const s = await p.connect(ctx, id);
         const r = await s.exec("echo installed; uname -s", { cwd: "/tmp" });
         console.log(JSON.stringify(r));
       } finally {
         await p.destroy(ctx, id);
       }\n`,
    );
    const r = JSON.parse(run(process.execPath, ["main.mjs"], dir));
    assert.deepEqual([r.exitCode, r.stdout], [0, "installed\nLinux\n"]);
  });
});
