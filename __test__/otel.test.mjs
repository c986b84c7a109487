// OpenTelemetry spans (js/tracing.js). Without @opentelemetry/api the
// provider is the plain one and the lookup fails silently; with the API but
// no SDK, calls work and nothing is recorded; with an SDK registered
// globally (AsyncHooksContextManager), every call is a span, a child of the
// caller's, with ids, counts and codes as attributes, the lifecycle events
// as span events, the error code on a failure, and none of the secrets the
// calls handled (the command text, an env value, file content, a path, the
// token).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { after, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { context, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { AsyncHooksContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
import { actorId, clientToken, namespace, skip } from "./cluster.mjs";
import { OPTIONS } from "./sandbox-fixture.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const pkg = JSON.parse(readFileSync(`${root}package.json`, "utf8"));

test("without @opentelemetry/api installed, the provider works untraced and nothing is thrown", () => {
  // A resolve hook makes the API unresolvable, as in an application without it.
  const script = `
    import { registerHooks } from "node:module";
    let asked = false;
    registerHooks({
      resolve(specifier, context, next) {
        if (specifier !== "@opentelemetry/api") return next(specifier, context);
        asked = true;
        throw Object.assign(new Error("Cannot find module '@opentelemetry/api'"), { code: "MODULE_NOT_FOUND" });
      },
    });
    const { agentSandboxProvider } = await import(${JSON.stringify(pkg.name)});
    const p = agentSandboxProvider({ namespace: "x", warmPool: "p" });
    const err = await p.connect({ actorId: "a" }, 42).catch((e) => e);
    const loaded = globalThis[Symbol.for("opentelemetry.js.api.1")] !== undefined;
    console.log(JSON.stringify({ asked, loaded, code: err.code, name: p.name }));`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { cwd: root, encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, "", "no warning, no error");
  assert.deepEqual(JSON.parse(r.stdout), { asked: true, loaded: false, code: "invalid_request", name: "agent-sandbox" });
});

describe("OpenTelemetry spans on the local cluster", { skip, timeout: 300_000 }, () => {
  after(() => {
    trace.disable();
    context.disable();
  });

  test("no tracer provider registered: calls work and record nothing", async () => {
    const p = agentSandboxProvider(OPTIONS);
    const ctx = { actorId: actorId("otel-noop"), client: () => undefined };
    const id = await p.create(ctx);
    try {
      const sandbox = await p.connect(ctx, id);
      const r = await sandbox.exec("echo noop");
      assert.deepEqual([r.exitCode, r.stdout], [0, "noop\n"]);
      await assert.rejects(sandbox.readFile("/nonexistent-otel-noop"), { code: "not_found" });
    } finally {
      await p.destroy(ctx, id);
    }
  });

  test("create, connect, sandbox and process calls, destroy: spans under the caller's, without secrets", async () => {
    const exporter = new InMemorySpanExporter();
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
    context.setGlobalContextManager(new AsyncHooksContextManager().enable());

    const secret = `s3cret-${randomBytes(8).toString("hex")}`;
    const command = `echo "$API_KEY" | wc -c # unmistakable-command-text`;
    const content = `file-content-${randomBytes(8).toString("hex")}`;
    const path = `/tmp/otel-${process.pid}-${randomBytes(4).toString("hex")}.txt`;
    const missing = `${path}.missing`;
    const events = [];
    const p = agentSandboxProvider({ ...OPTIONS, onEvent: (e) => events.push(e) });
    const ctx = { actorId: actorId("otel"), client: () => undefined };

    /** @type {string | undefined} */
    let id;
    let proc;
    let exec;
    await trace.getTracer("otel-test").startActiveSpan("rivet.run", async (run) => {
      try {
        id = await p.create(ctx);
        const sandbox = await p.connect(ctx, id);
        exec = await sandbox.exec(command, { env: { API_KEY: secret } });
        await sandbox.writeFile(path, content);
        assert.equal(Buffer.from(await sandbox.readFile(path)).toString(), content);
        await assert.rejects(sandbox.readFile(missing), { code: "not_found" });
        proc = await sandbox.spawn("sleep 60");
        await proc.kill();
        await proc.wait();
      } finally {
        if (id) await p.destroy(ctx, id);
        run.end();
      }
    });
    assert.deepEqual([exec.exitCode, exec.stdout.trim()], [0, String(secret.length + 1)], "the command got its env");

    const spans = exporter.getFinishedSpans();
    const run = spans.find((s) => s.name === "rivet.run");
    assert.ok(run);
    const ours = spans.filter((s) => s !== run);
    assert.deepEqual(
      ours.map((s) => s.name),
      [
        "sandbox.provider.create",
        "sandbox.provider.connect",
        "sandbox.exec",
        "sandbox.writeFile",
        "sandbox.readFile",
        "sandbox.readFile",
        "sandbox.spawn",
        "sandbox.process.kill",
        "sandbox.process.wait",
        "sandbox.provider.destroy",
      ],
    );
    for (const s of ours) {
      assert.equal(s.parentSpanContext?.spanId, run.spanContext().spanId, `${s.name} is a child of the caller's span`);
      assert.equal(s.spanContext().traceId, run.spanContext().traceId);
      assert.equal(s.kind, SpanKind.CLIENT);
      assert.deepEqual([s.instrumentationScope.name, s.instrumentationScope.version], [pkg.name, pkg.version]);
      assert.equal(s.attributes["sandbox.id"], id, s.name);
      assert.equal(s.attributes["k8s.namespace.name"], namespace, s.name);
      assert.equal(s.attributes["sandbox.mode"], "warm_pool", s.name);
    }
    const [create, connect, execSpan, write, read, failed, spawn, kill, wait, destroy] = ours;

    // Success leaves the status unset (OpenTelemetry's rule for libraries);
    // the failure is ERROR with the error's code.
    for (const s of ours.filter((s) => s !== failed)) assert.deepEqual(s.status, { code: SpanStatusCode.UNSET }, s.name);
    assert.deepEqual(failed.status, { code: SpanStatusCode.ERROR, message: "not_found" });
    assert.equal(failed.attributes["error.type"], "not_found");
    assert.ok(ours.filter((s) => s !== failed).every((s) => !("error.type" in s.attributes)));

    assert.equal(execSpan.attributes["process.exit.code"], 0);
    assert.equal(execSpan.attributes["sandbox.exec.command_bytes"], Buffer.byteLength(command));
    assert.equal(execSpan.attributes["sandbox.exec.stdout_bytes"], Buffer.byteLength(exec.stdout));
    assert.equal(execSpan.attributes["sandbox.exec.truncated"], false);
    assert.equal(write.attributes["sandbox.file.bytes"], Buffer.byteLength(content));
    assert.equal(read.attributes["sandbox.file.bytes"], Buffer.byteLength(content));
    for (const s of [spawn, kill, wait]) {
      assert.equal(s.attributes["sandbox.process.id"], proc.id, s.name);
      assert.equal(s.attributes["process.pid"], proc.pid, s.name);
    }
    assert.equal(wait.attributes["sandbox.timed_out"], false);

    // The addon's events are span events of the call they belong to: each one once, in its call's span.
    const names = (s) => s.events.map((e) => e.name);
    assert.ok(names(create).includes("claimed"), `create: ${names(create)}`);
    assert.ok(names(connect).includes("ready"), `connect: ${names(connect)}`);
    assert.ok(names(connect).some((n) => n === "adopted" || n === "cold_start"), `connect: ${names(connect)}`);
    assert.ok(names(destroy).includes("deleted"), `destroy: ${names(destroy)}`);
    assert.deepEqual([...names(create), ...names(connect), ...names(destroy)].sort(), events.map((e) => e.type).sort());
    const ready = connect.events.find((e) => e.name === "ready");
    assert.equal(typeof ready.attributes["sandbox.event.elapsed_ms"], "number");

    // No secret in any name, attribute, status or event of the trace.
    const token = clientToken();
    assert.ok(token && token.length > 20, "the test kubeconfig has a token");
    const dump = JSON.stringify(spans.map((s) => [s.name, s.attributes, s.status, s.events]));
    for (const leak of [secret, "unmistakable-command-text", content, path, token]) {
      assert.ok(!dump.includes(leak), `the spans carry ${leak.slice(0, 16)}…`);
    }
  });
});
