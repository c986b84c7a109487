// The error codes are listed where a user or a maintainer reads them: the
// core's ErrorCode (core/src/error.rs, what the addon sends and exports), the
// package's `ErrorCode` object (built from the addon), its declaration in
// index.d.ts, and the README. They must be the same.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { ErrorCode } from "../index.js";

const read = (path) => readFileSync(new URL(`../${path}`, import.meta.url), "utf8");

test("core, index.d.ts and README list the same error codes", () => {
  const core = [...read("core/src/error.rs").matchAll(/ErrorCode::\w+ => "([a-z_]+)"/g)].map((m) => m[1]);
  const declared = /export const ErrorCode: \{([^}]+)\}/.exec(read("index.d.ts"))[1];
  const dts = Object.fromEntries([...declared.matchAll(/readonly (\w+): "([a-z_]+)";/g)].map((m) => [m[1], m[2]]));
  const readme = /Every rejection is an `Error` with a stable `code`: ([^.]+)\./.exec(read("README.md").replace(/\n/g, " "))[1]
    .match(/`([a-z_]+)`/g)
    .map((s) => s.slice(1, -1));
  assert.ok(core.length >= 14, `found ${core.length} codes in error.rs`);
  assert.equal(new Set(core).size, core.length, "no code twice");
  assert.deepEqual(Object.values(ErrorCode), core, "the exported ErrorCode, in the core's order");
  assert.ok(Object.isFrozen(ErrorCode));
  assert.deepEqual({ ...ErrorCode }, dts, "index.d.ts declares the exported object");
  assert.deepEqual([...readme].sort(), [...core].sort(), "README");
  const troubleshooting = /### Troubleshooting\n([\s\S]*?)\n### /.exec(read("README.md"))[1];
  const rows = [...troubleshooting.matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1]);
  assert.deepEqual(rows, core, "README's troubleshooting table: one row per code, in the core's order");
});
