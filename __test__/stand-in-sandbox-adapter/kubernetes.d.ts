export { agentSandboxProvider } from "@rivet-dev/sandbox-adapter-kubernetes";
export type * from "@rivet-dev/sandbox-adapter-kubernetes";
