// The package as npm will publish it: napi's targets, the npm/<platform>
// packages, the optional dependencies `napi prepublish` gives the root, and
// the generated loader agree;
// `npm pack` contains exactly the files it should; a platform without an
// addon gets a `config` error naming what to install. No cluster needed.

import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";
import { prepublishedCopy } from "./prepublish.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const pkg = JSON.parse(readFileSync(`${root}package.json`, "utf8"));
/** napi's triple → npm's platform key, for the targets we ship. */
const KEY = {
  "x86_64-unknown-linux-gnu": ["linux-x64-gnu", "linux", "x64", "glibc"],
  "aarch64-unknown-linux-gnu": ["linux-arm64-gnu", "linux", "arm64", "glibc"],
  "x86_64-unknown-linux-musl": ["linux-x64-musl", "linux", "x64", "musl"],
  "aarch64-unknown-linux-musl": ["linux-arm64-musl", "linux", "arm64", "musl"],
  "x86_64-apple-darwin": ["darwin-x64", "darwin", "x64"],
  "aarch64-apple-darwin": ["darwin-arm64", "darwin", "arm64"],
  "x86_64-pc-windows-msvc": ["win32-x64-msvc", "win32", "x64"],
};

describe("packaging", () => {
  const keys = pkg.napi.targets.map((t) => {
    assert.ok(KEY[t], `unknown target ${t}`);
    return KEY[t][0];
  });

  test("targets, npm/ packages, optional dependencies and the loader agree", async () => {
    assert.deepEqual(readdirSync(`${root}npm`).sort(), [...keys].sort(), "one npm/ folder per target");
    const loader = readFileSync(`${root}native.cjs`, "utf8");
    const expectedDeps = {};
    for (const target of pkg.napi.targets) {
      const [key, os, cpu, libc] = KEY[target];
      const name = `${pkg.napi.packageName}-${key}`;
      expectedDeps[name] = pkg.version;
      const sub = JSON.parse(readFileSync(`${root}npm/${key}/package.json`, "utf8"));
      assert.equal(sub.name, name);
      assert.equal(sub.version, pkg.version, `${name}: same version as the root`);
      assert.deepEqual([sub.os, sub.cpu], [[os], [cpu]], name);
      if (libc) assert.deepEqual(sub.libc, [libc], name);
      const file = `${pkg.napi.binaryName}.${key}.node`;
      assert.equal(sub.main, file);
      assert.deepEqual(sub.files, [file]);
      assert.match(loader, new RegExp(`require\\('${name.replace("/", "\\/")}'\\)`), `the loader loads ${name}`);
    }
    assert.equal(pkg.name, pkg.napi.packageName);
    const { PREBUILT } = await import("../js/native.js");
    assert.deepEqual([...PREBUILT].sort(), [...keys].sort(), "the loader's error names the platforms we build");
    // Not in the repository's package.json (npm ci would want them in the
    // lockfile before they exist): `napi prepublish` adds them at release.
    assert.equal(pkg.optionalDependencies, undefined);
    const copy = prepublishedCopy();
    try {
      const published = JSON.parse(readFileSync(join(copy, "package.json"), "utf8"));
      assert.deepEqual(published.optionalDependencies, expectedDeps, "each platform package, at exactly the root's version");
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
  });

  test("engines is the adapter's own range (>= 22.19.0: Node 23, 25 and 27 too), on the root and every platform package", () => {
    // @rivet-dev/sandbox-adapter says `node >= 22.19.0`; a narrower range here
    // would make npm warn (or refuse, with engine-strict) where the adapter runs.
    for (const dir of ["", ...keys.map((k) => `npm/${k}/`)]) {
      const { engines } = JSON.parse(readFileSync(`${root}${dir}package.json`, "utf8"));
      assert.deepEqual(engines, { node: ">=22.19.0" }, `${dir}package.json`);
    }
  });

  test("npm pack contains exactly the package's files", () => {
    const [packed] = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json"], { cwd: root, encoding: "utf8" }));
    const files = packed.files.map((f) => f.path).sort();
    const js = readdirSync(`${root}js`).map((f) => `js/${f}`);
    assert.deepEqual(files, ["LICENSE", "README.md", "index.d.ts", "index.js", ...js, "native.cjs", "native.d.ts", "package.json"].sort());
    assert.ok(!files.some((f) => f.endsWith(".node")), "no binary in the root package");
  });

  test("the ./kubernetes subpath exports the provider, with the same types", async () => {
    const main = await import(pkg.name);
    const sub = await import(`${pkg.name}/kubernetes`);
    assert.equal(sub.agentSandboxProvider, main.agentSandboxProvider);
    assert.deepEqual(pkg.exports["./kubernetes"], pkg.exports["."]);
  });

  for (const [label, platform, arch, wanted] of [
    ["an unsupported platform", "freebsd", "x64", /no prebuilt native addon for freebsd-x64.*prebuilt: linux-x64-gnu/],
    ["a supported platform whose package is missing", "linux", "riscv64", /no prebuilt native addon for linux-riscv64-gnu/],
    ["arm64 Linux without its package", "linux", "arm64", /sandbox-adapter-kubernetes-linux-arm64-gnu is missing.*npm install/],
  ]) {
    test(`${label} gets a config error naming what it looked for`, () => {
      const script = `
        Object.defineProperty(process, "platform", { value: ${JSON.stringify(platform)} });
        Object.defineProperty(process, "arch", { value: ${JSON.stringify(arch)} });
        try { await import(${JSON.stringify(pkg.name)}); console.log("loaded"); }
        catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }`;
      const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { cwd: root, encoding: "utf8" });
      assert.equal(r.status, 0, r.stderr);
      const err = JSON.parse(r.stdout);
      assert.equal(err.code, "config");
      assert.match(err.message, wanted);
    });
  }
});
