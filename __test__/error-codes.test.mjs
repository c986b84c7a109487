// The error codes are listed where a user or a maintainer reads them: the
// core's ErrorCode (core/src/error.rs, what the addon sends and exports), the
// package's `ErrorCode` object (built from the addon), its declaration in
// index.d.ts, and the API reference (docs/api.md). They must be the same.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { ErrorCode } from "../index.js";

const read = (path) => readFileSync(new URL(`../${path}`, import.meta.url), "utf8");

test("core, index.d.ts and docs/api.md list the same error codes", () => {
  const core = [...read("core/src/error.rs").matchAll(/ErrorCode::\w+ => "([a-z_]+)"/g)].map((m) => m[1]);
  const declared = /export const ErrorCode: \{([^}]+)\}/.exec(read("index.d.ts"))[1];
  const dts = Object.fromEntries([...declared.matchAll(/readonly (\w+): "([a-z_]+)";/g)].map((m) => [m[1], m[2]]));
  const api = read("docs/api.md");
  const listed = /Every rejection is an `Error` with a stable `code`: ([^.]+)\./.exec(api.replace(/\n/g, " "))[1]
    .match(/`([a-z_]+)`/g)
    .map((s) => s.slice(1, -1));
  assert.ok(core.length >= 14, `found ${core.length} codes in error.rs`);
  assert.equal(new Set(core).size, core.length, "no code twice");
  assert.deepEqual(Object.values(ErrorCode), core, "the exported ErrorCode, in the core's order");
  assert.ok(Object.isFrozen(ErrorCode));
  assert.deepEqual({ ...ErrorCode }, dts, "index.d.ts declares the exported object");
  assert.deepEqual([...listed].sort(), [...core].sort(), "docs/api.md, Errors");
  const table = /^### Error codes\n([\s\S]*?)\n#/m.exec(api)[1];
  const rows = [...table.matchAll(/^\| `([a-z_]+)` \| `(\w+)` \|/gm)];
  assert.deepEqual(rows.map((m) => m[1]), core, "docs/api.md's table of error codes: one row per code, in the core's order");
  assert.deepEqual(Object.fromEntries(rows.map((m) => [m[2], m[1]])), { ...ErrorCode }, "each row names its ErrorCode key");
});
