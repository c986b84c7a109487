// AGENT_SANDBOX_LOG=debug: a child process's stderr traces the lifecycle
// calls, their progress and warning events and each exec's start and end, and carries
// none of the secrets it handled (the token, an env value, the command text).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { skip } from "./cluster.mjs";
import { OPTIONS } from "./sandbox-fixture.mjs";

const child = `
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
const provider = agentSandboxProvider(JSON.parse(process.env.OPTIONS));
const ctx = { actorId: "trace-" + process.pid, client: () => undefined };
const id = await provider.create(ctx);
try {
  const sandbox = await provider.connect(ctx, id);
  const r = await sandbox.exec(process.env.COMMAND, { env: { API_KEY: process.env.SECRET } });
  process.stdout.write(r.stdout);
} finally {
  await provider.destroy(ctx, id);
}
`;

describe("AGENT_SANDBOX_LOG=debug", { skip, timeout: 180_000 }, () => {
  test("traces calls, events and execs on stderr without secrets", () => {
    const secret = `s3cret-${randomBytes(8).toString("hex")}`;
    const command = `echo "$API_KEY" | wc -c # unmistakable-command-text`;
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", child], {
      encoding: "utf8",
      timeout: 170_000,
      env: { ...process.env, AGENT_SANDBOX_LOG: "debug", OPTIONS: JSON.stringify(OPTIONS), COMMAND: command, SECRET: secret },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), String(secret.length + 1), "the command got its env");
    const lines = r.stderr.split("\n").filter((l) => l.startsWith("[agent-sandbox "));
    const has = (re) => assert.ok(lines.some((l) => re.test(l)), `no line matching ${re}:\n${r.stderr}`);
    has(/ create trace-\d+: start$/);
    has(/ create trace-\d+: made \S+ after \d+ ms$/);
    // The pool's template has no RuntimeClass (this cluster has none): the warning event, traced.
    has(/ Warning after \d+ ms: SandboxTemplate "ephemeral" .* names no `runtimeClassName`/);
    has(/ connect \S+: ready in \S+\/\S+ \(fresh\) after \d+ ms$/);
    has(/ Ready after \d+ ms, sandbox \S+/);
    has(/ exec \S+ in \S+: start \(\d+ command bytes, 0 stdin bytes, env \["API_KEY"\], cwd "[^"]*"\)$/);
    has(/ exec \S+: exit 0 after \d+ ms$/);
    has(/ destroy \S+: done after \d+ ms$/);
    const token = /token: (\S+)/.exec(readFileSync(process.env.KUBECONFIG, "utf8"))?.[1];
    assert.ok(token && token.length > 20, "the test kubeconfig has a token");
    for (const leak of [token, secret, "unmistakable-command-text"]) {
      assert.ok(!r.stderr.includes(leak), `stderr carries ${leak.slice(0, 12)}…`);
    }
  });

  test("off by default: nothing on stderr", () => {
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", child], {
      encoding: "utf8",
      timeout: 170_000,
      env: { ...process.env, AGENT_SANDBOX_LOG: "", OPTIONS: JSON.stringify(OPTIONS), COMMAND: "true", SECRET: "x" },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stderr, "");
  });
});
