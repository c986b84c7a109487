// How @rivet-dev/sandbox-adapter would expose the Kubernetes provider: a
// re-export of the optional peer dependency, so installing the adapter alone
// pulls in no native addon.
export { agentSandboxProvider, ErrorCode } from "@rivet-dev/sandbox-adapter-kubernetes";
