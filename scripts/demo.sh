#!/usr/bin/env bash
# The main job, end to end: creates a sandbox, runs commands, suspends,
# resumes and destroys it (examples/lifecycle.mjs). Against your cluster when
# KUBECONFIG is set (pass SANDBOX_NAMESPACE and SANDBOX_WARM_POOL or
# SANDBOX_IMAGE), otherwise against the local control plane, started here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/lib/cargo-env.sh
[[ -d node_modules/@napi-rs/cli ]] || npm ci --no-audit --no-fund
ls agent-sandbox-provider.*.node >/dev/null 2>&1 || npm run build
[[ -n ${KUBECONFIG:-} ]] || bash dev/cluster/cluster.sh up
exec node examples/lifecycle.mjs
