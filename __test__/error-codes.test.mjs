// The error codes are listed in three places a user or a maintainer reads:
// the core's ErrorCode (core/src/error.rs, what the addon sends), the
// `ErrorCode` type of index.d.ts, and the README. They must be the same set.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

const read = (path) => readFileSync(new URL(`../${path}`, import.meta.url), "utf8");

test("core, index.d.ts and README list the same error codes", () => {
  const core = [...read("core/src/error.rs").matchAll(/ErrorCode::\w+ => "([a-z_]+)"/g)].map((m) => m[1]);
  const dts = /export type ErrorCode =([^;]+);/.exec(read("index.d.ts"))[1].match(/"([a-z_]+)"/g).map((s) => s.slice(1, -1));
  const readme = /Every rejection is an `Error` with a stable `code`: ([^.]+)\./.exec(read("README.md").replace(/\n/g, " "))[1]
    .match(/`([a-z_]+)`/g)
    .map((s) => s.slice(1, -1));
  assert.ok(core.length >= 13, `found ${core.length} codes in error.rs`);
  assert.equal(new Set(core).size, core.length, "no code twice");
  assert.deepEqual([...dts].sort(), [...core].sort(), "index.d.ts");
  assert.deepEqual([...readme].sort(), [...core].sort(), "README");
});
