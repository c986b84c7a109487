// agent-sandbox-provider: a Rivet sandbox provider on Kubernetes agent-sandbox.
// Types: index.d.ts. The native addon is loaded by js/ through native.cjs.
export { agentSandboxProvider } from "./js/provider.js";
export { ErrorCode } from "./js/errors.js";
