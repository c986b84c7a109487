#!/usr/bin/env bash
# The project's test command (see README): installs and builds everything it
# needs, starts the local control plane, and runs every test suite, all on
# the current LTS Node (NODE_LTS in scripts/lib/node.sh: fetched from npm and
# cached; scripts/test-node-matrix.sh runs the suite on the other majors):
#   1. the static checks first (scripts/lint.sh: shellcheck, rustfmt, clippy,
#      rustdoc, cargo deny, gofmt, go vet, tsc and the type-level test of
#      index.d.ts), which need no release build and no cluster, so a
#      formatting or lint error fails within a minute or two
#   2. Rust unit tests of the core (cargo test)
#   3. the local control plane's smoke test (kubectl, least privilege)
#   4. the JS integration tests (node --test) against the local cluster,
#      their sandboxes under runc
#   5. the suites of what runs inside a sandbox again, their sandboxes under
#      gVisor (the RuntimeClass GKE Sandbox users have); both steps run to
#      their end, and either failing fails the command
# Leaves the cluster running for the next run (`dev/cluster/cluster.sh down` stops it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n=== %s\n' "$*"; }

# Rust build output is cached outside the checkout, like the Go binaries.
source scripts/lib/cargo-env.sh
source scripts/lib/shellcheck.sh
source scripts/lib/node.sh

node_lts=$(node_bin "$NODE_LTS")
export PATH=$node_lts:$PATH
step "Node $(node --version) ($node_lts), npm $(npm --version)"

step "npm install"
if [[ -f package-lock.json ]]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi

# First: lint needs node_modules (tsc) and a debug build (clippy), no cluster.
step "static checks"
bash scripts/lint.sh

step "build the addon (release)"
npm run build
# lint.sh's last check, again now that napi has regenerated the loader.
if ! git diff --quiet -- native.cjs native.d.ts; then
	echo "native.cjs or native.d.ts differ from what the napi build generated: commit them" >&2
	exit 1
fi

step "local control plane"
bash dev/cluster/cluster.sh up
# shellcheck disable=SC1091
source "${SANDBOX_CLUSTER_STATE:-.cluster}/env"

step "cargo test (core)"
cargo test -p sandbox-core

step "cluster smoke test"
bash dev/cluster/smoke.sh

step "JS integration tests (runc)"
status=0
node --test --test-concurrency=1 __test__/*.test.mjs || status=$?
step "JS integration tests of what runs in a sandbox (gVisor)"
SANDBOX_TEST_NAMESPACE=$SANDBOX_TEST_GVISOR_NAMESPACE SANDBOX_TEST_RUNTIME_CLASS=gvisor \
	node --test --test-concurrency=1 __test__/{lifecycle,exec,files,process,terminal,ports,usage}.test.mjs || status=$?
exit "$status"
