// The root package as `napi prepublish` (the release's prepublishOnly) makes
// it: a copy of the package's files and npm/ folders in a scratch git repo,
// with stand-in binaries for the platforms not built here, prepublished
// without publishing anything. Returns the copy's folder.

import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));

/** A prepublished copy of the root package in a new scratch folder (the caller removes it). */
export function prepublishedCopy() {
  const pkg = JSON.parse(readFileSync(`${root}package.json`, "utf8"));
  const dir = mkdtempSync(join(tmpdir(), "prepublished-"));
  for (const f of ["package.json", "README.md", "npm", ...pkg.files]) cpSync(`${root}${f}`, join(dir, f), { recursive: true });
  for (const platform of readdirSync(join(dir, "npm"))) {
    const file = join(dir, "npm", platform, `${pkg.napi.binaryName}.${platform}.node`);
    if (!existsSync(file)) writeFileSync(file, "");
  }
  const git = (...args) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd: dir, stdio: "ignore" });
  git("init", "-q");
  git("add", "-A");
  git("commit", "-qm", "release");
  execFileSync(process.execPath, [`${root}node_modules/@napi-rs/cli/dist/cli.js`, "prepublish", "-t", "npm", "--skip-optional-publish"], {
    cwd: dir,
    stdio: ["ignore", "pipe", "pipe"],
  });
  return dir;
}
