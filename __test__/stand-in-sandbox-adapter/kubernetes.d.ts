export { agentSandboxProvider, ErrorCode } from "@rivet-dev/sandbox-adapter-kubernetes";
export type * from "@rivet-dev/sandbox-adapter-kubernetes";
