// Test helpers for the local control plane (dev/cluster): loads .cluster/env
// when the shell did not source it, and inspects objects with the admin
// kubeconfig (the provider itself runs as the least-privilege ServiceAccount).

import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const envFile = `${root}.cluster/env`;

if (!process.env.SANDBOX_TEST_ADMIN_KUBECONFIG && existsSync(envFile)) {
  for (const line of readFileSync(envFile, "utf8").split("\n")) {
    const m = /^export ([A-Z_]+)=(.*)$/.exec(line.trim());
    if (m) process.env[m[1]] = m[2].replace(/^"(.*)"$/, "$1");
  }
}

/** Why the cluster tests cannot run, or undefined when they can. */
export const skip = process.env.SANDBOX_TEST_ADMIN_KUBECONFIG
  ? undefined
  : "no local cluster: run `bash dev/cluster/cluster.sh up` (writes .cluster/env)";

export const namespace = process.env.SANDBOX_TEST_NAMESPACE ?? "agents";

/**
 * The sandbox image of direct-mode tests: the real node's Debian image
 * (dev/cluster/node/images.sh), the one the shipped templates name; no image
 * can be pulled there.
 */
export const image = "docker.io/library/debian:bookworm-slim";

/**
 * The RuntimeClass this run's sandboxes use (SANDBOX_TEST_RUNTIME_CLASS,
 * with SANDBOX_TEST_NAMESPACE the namespace whose templates and admission
 * policy name it); undefined: the node's default, runc.
 */
export const runtimeClassName = process.env.SANDBOX_TEST_RUNTIME_CLASS || undefined;

/** The sandboxes run under gVisor. */
export const gvisor = runtimeClassName === "gvisor";

/** Direct-mode `sandbox` options for this run: the image, the runtime class, then `extra`. */
export function directSandbox(extra = {}) {
  return { image, ...(runtimeClassName ? { runtimeClassName } : {}), ...extra };
}

/**
 * BusyBox alone (dev/cluster/node/images.sh): the README's claim that
 * /bin/sh and coreutils are all the image needs, and under gVisor the relay
 * through BusyBox's nc.
 */
export const busyboxImage = "docker.io/library/busybox:1.35";

/** The node sandboxes run on (a real kubelet: dev/cluster/node/realnode.sh). */
export const node = process.env.SANDBOX_TEST_REAL_NODE ?? "real-node-0";

/** An image on the node without /bin/sh (the pod sandbox's pause image): a container that cannot start. */
export const noShellImage = "registry.k8s.io/pause:3.10.2";

/** Runs kubectl as the cluster admin in the test namespace. */
export function kubectl(...args) {
  return execFileSync(
    process.env.SANDBOX_TEST_KUBECTL ?? "kubectl",
    ["--kubeconfig", process.env.SANDBOX_TEST_ADMIN_KUBECONFIG, "-n", namespace, ...args],
    { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] },
  );
}

/** The object as JSON, or null when it does not exist. */
export function getObject(kind, name) {
  const out = kubectl("get", kind, name, "--ignore-not-found", "-o", "json").trim();
  return out ? JSON.parse(out) : null;
}

/** Objects named after a Sandbox that still exist (after destroy: none). */
export function leftovers(sandboxName) {
  const objects = [
    ["sandboxes.agents.x-k8s.io", sandboxName],
    ["pods", sandboxName],
    ["services", sandboxName],
    ["persistentvolumeclaims", `workspace-${sandboxName}`],
  ];
  return objects.filter(([kind, name]) => getObject(kind, name)).map(([kind, name]) => `${kind}/${name}`);
}

/** Stops or starts only the kube-apiserver (outage tests). */
export function apiserver(action) {
  execFileSync("bash", [process.env.SANDBOX_CLUSTER_SCRIPT ?? `${root}dev/cluster/cluster.sh`, "apiserver", action], {
    stdio: "ignore",
  });
}

/** The bearer token of the test ServiceAccount's kubeconfig (to prove it never leaks). */
export function clientToken() {
  const kubeconfig = readFileSync(process.env.KUBECONFIG, "utf8");
  return /token:\s*(\S+)/.exec(kubeconfig)?.[1];
}

/** A fresh actor id per test run. */
export function actorId(label) {
  return `test-${label}-${process.pid}-${Date.now().toString(36)}`;
}

/** The object name part of a provider id (`namespace/name`). */
export function objectName(id) {
  return id.split("/")[1];
}

/**
 * A port for a test's server in a pod. The local node's pods share the
 * host's network namespace, so it stays below the host's ephemeral range
 * (Linux: 32768 and up), where the control plane's many loopback connections
 * take their local ports: a server there can find its port taken (a CI run
 * saw `python3 -m http.server` never answer).
 */
export const serverPort = () => 20000 + Math.floor(Math.random() * 12000);
