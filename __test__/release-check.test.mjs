// scripts/release-check-packages.sh, the release's last gate before publish:
// it passes tarballs that hold the committed files and the binaries whose
// sha256 the build jobs recorded, and refuses a binary swapped after the
// build (the digest differs) or a platform with no recorded digest. The
// tarballs are made here with tar, laid out as `npm pack` lays them out.
// No cluster needed; Linux and macOS only (bash).

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, describe, test } from "node:test";

const root = fileURLToPath(new URL("..", import.meta.url));
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const platforms = readdirSync(join(root, "npm")).sort();

describe("release-check-packages.sh", { skip: process.platform === "win32" && "needs bash" }, () => {
  const dir = mkdtempSync(join(tmpdir(), "release-check-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const packages = join(dir, "packages");
  const digests = new Map();

  /** Tars DIR/package into OUT, as npm pack does (a top-level `package/`). */
  const tarball = (from, out) => {
    const r = spawnSync("tar", ["-czf", out, "-C", from, "package"]);
    assert.equal(r.status, 0, String(r.stderr));
  };
  const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");
  const check = (lines) => {
    const file = join(dir, "digests.txt");
    writeFileSync(file, lines.map(([p, d]) => `${p} ${d}\n`).join(""));
    return spawnSync("bash", [join(root, "scripts/release-check-packages.sh"), packages, file], { encoding: "utf8" });
  };

  for (const platform of platforms) {
    const work = join(dir, "work", platform, "package");
    mkdirSync(work, { recursive: true });
    for (const f of ["package.json", "README.md"]) cpSync(join(root, "npm", platform, f), join(work, f));
    const binary = Buffer.from(`the ${platform} binary`);
    writeFileSync(join(work, `${pkg.napi.binaryName}.${platform}.node`), binary);
    digests.set(platform, sha256(binary));
    mkdirSync(join(packages, "platform"), { recursive: true });
    tarball(join(work, ".."), join(packages, "platform", `${pkg.name.slice(1).replace("/", "-")}-${platform}-${pkg.version}.tgz`));
  }
  const rootWork = join(dir, "work", "root", "package");
  mkdirSync(rootWork, { recursive: true });
  const optionalDependencies = Object.fromEntries(platforms.map((p) => [`${pkg.name}-${p}`, pkg.version]));
  writeFileSync(join(rootWork, "package.json"), JSON.stringify({ ...pkg, optionalDependencies }, null, 2));
  mkdirSync(join(packages, "root"), { recursive: true });
  tarball(join(rootWork, ".."), join(packages, "root", "root.tgz"));

  test("the recorded digests pass", () => {
    const r = check([...digests]);
    assert.equal(r.status, 0, r.stderr);
  });

  test("a binary other than the recorded one is refused", () => {
    const [first] = platforms;
    const r = check([...digests].map(([p, d]) => [p, p === first ? sha256(Buffer.from("a swapped binary")) : d]));
    assert.equal(r.status, 1);
    assert.match(r.stderr, new RegExp(`${first}: .* is not the binary its build job recorded`));
  });

  test("a platform without a recorded digest is refused", () => {
    const [, second] = platforms;
    const r = check([...digests].filter(([p]) => p !== second));
    assert.equal(r.status, 1);
    assert.match(r.stderr, new RegExp(`${second}: .*recorded none`));
  });
});
