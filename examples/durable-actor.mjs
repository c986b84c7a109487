// One durable actor's life, driven the way Rivet's runtime drives a sandbox
// provider (@rivet-dev/pi's connectSandbox / closeSandbox): only
// { provider: name, id } is stored; a wake connects lazily on the first tool
// call; `undefined` from connect means the sandbox is gone (create a new one,
// its files are lost), a thrown error propagates; sleep suspends; destroy
// deletes. Each generation of the actor uses a new provider object, as a new
// host process would.
//
//   node examples/durable-actor.mjs     # the local cluster (dev/cluster), warm pool "pool-workspace"
//   KUBECONFIG=~/.kube/config SANDBOX_NAMESPACE=agents SANDBOX_WARM_POOL=my-pool node examples/durable-actor.mjs

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";

const envFile = new URL("../.cluster/env", import.meta.url);
if (!process.env.KUBECONFIG && existsSync(envFile)) {
  for (const m of readFileSync(envFile, "utf8").matchAll(/^export ([A-Z_]+)=(.*)$/gm)) process.env[m[1]] ??= m[2];
}

/** The actor's persisted state (Rivet keeps it in the actor's SQLite). */
class ActorState {
  constructor(dir) {
    this.file = join(dir, "pi_sandbox.json");
  }
  load() {
    return existsSync(this.file) ? JSON.parse(readFileSync(this.file, "utf8")) : undefined;
  }
  save(row) {
    writeFileSync(this.file, JSON.stringify(row));
  }
  clear() {
    rmSync(this.file, { force: true });
  }
}

/** One generation of the actor: from a wake to its sleep (or destroy). */
class Generation {
  constructor(state, actorId) {
    this.state = state;
    this.ctx = { actorId, client: () => undefined };
    // A new host process builds its provider from the same options.
    this.provider = agentSandboxProvider({
      warmPool: process.env.SANDBOX_WARM_POOL ?? "pool-workspace",
      namespace: process.env.SANDBOX_NAMESPACE ?? process.env.SANDBOX_TEST_NAMESPACE,
      ttlSeconds: 3600,
    });
  }

  /** Lazy and memoized, as the runtime's connect; reset on failure. */
  sandbox() {
    this.connecting ??= this.connect().catch((err) => {
      this.connecting = undefined;
      throw err;
    });
    return this.connecting;
  }

  async connect() {
    const stored = this.state.load();
    if (stored && stored.provider !== this.provider.name) throw new Error("an actor cannot switch providers");
    if (stored) {
      const sandbox = await this.provider.connect(this.ctx, stored.id);
      if (sandbox) return (this.id = stored.id), sandbox;
      console.log("the stored sandbox is gone; its files are lost: creating a new one");
    }
    const id = await this.provider.create(this.ctx);
    this.state.save({ provider: this.provider.name, id, createdAt: Date.now() });
    const sandbox = await this.provider.connect(this.ctx, id);
    if (!sandbox) throw new Error(`sandbox ${id} not found right after it was created`);
    this.id = id;
    return sandbox;
  }

  /** What an agent's tools do: a shell command and a file write/read. */
  async tool(command) {
    const sandbox = await this.sandbox();
    const r = await sandbox.exec(command, { cwd: sandbox.cwd, timeoutMs: 60_000 });
    return r.stdout.trim();
  }

  /** The actor goes to sleep: suspend only if this generation connected. */
  async sleep() {
    if (this.connecting) await this.provider.suspend(this.ctx, this.id);
  }

  /** The actor is destroyed: the connected id, or else the stored one. */
  async destroy() {
    const id = this.id ?? this.state.load()?.id;
    if (id) await this.provider.destroy(this.ctx, id);
    this.state.clear();
  }
}

const dir = mkdtempSync(join(tmpdir(), "durable-actor-"));
const state = new ActorState(dir);
const actorId = `durable-example-${process.pid}`;
let gen;
try {
  gen = new Generation(state, actorId);
  console.log(`wake 1: ${await gen.tool("echo first run > notes.txt; pwd")}`);
  const first = state.load().id;
  await gen.sleep();
  console.log(`sleep: suspended ${first}`);

  gen = new Generation(state, actorId);
  const notes = await gen.tool("cat notes.txt");
  console.log(`wake 2: notes.txt says "${notes}" (same sandbox: ${state.load().id === first})`);
  if (notes !== "first run" || state.load().id !== first) throw new Error("the workspace did not survive the sleep");
  await gen.sleep();

  gen = new Generation(state, actorId);
  await gen.destroy();
  console.log(`destroy: deleted ${first}`);
  const after = new Generation(state, actorId);
  const gone = await after.provider.connect(after.ctx, first);
  console.log(`after destroy, connect(${first}) → ${gone}`);
  if (gone !== undefined) throw new Error("the sandbox outlived its destroy");
} catch (err) {
  await gen?.destroy().catch(() => {});
  throw err;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
