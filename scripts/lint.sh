#!/usr/bin/env bash
# Static checks, run by scripts/test.sh and on their own (`npm run lint`):
# Rust formatting, clippy (the lints in Cargo.toml, warnings as errors) and
# rustdoc's link checks, cargo deny (deny.toml: licenses, bans, sources;
# advisories where RustSec's database can be fetched), the release workflow's
# supply-chain rules, shellcheck of the project's scripts and (with dash -n)
# of the in-pod scripts' sources, gofmt, go vet and nodeexec's unit tests for the local
# control plane, and tsc over js/ (checkJs) and the type-level test of
# index.d.ts. Fails on the first problem.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/lib/cargo-env.sh
source scripts/lib/shellcheck.sh

echo "lint: shellcheck (the project's scripts and the local control plane's, dev/cluster)"
"$SHELLCHECK" -S warning scripts/*.sh scripts/lib/*.sh dev/cluster/*.sh dev/cluster/node/*.sh dev/cluster/node/*/*.sh .ci/run
echo "lint: the in-pod scripts, each file on its own (shellcheck -s sh, dash -n)"
# A library sets variables its scripts read (SC2034) and a script reads
# variables its libraries set (SC2154): those two are checked on the scripts
# as composed and as sent, by core/tests/shell_scripts.rs.
"$SHELLCHECK" -s sh -S warning -e SC2034,SC2154 core/src/*/sh/*.sh
for script in core/src/*/sh/*.sh; do dash -n "$script"; done
echo "lint: rustfmt"
cargo fmt --all --check
echo "lint: clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "lint: rustdoc (broken or private intra-doc links)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
echo "lint: cargo deny (deny.toml)"
bash scripts/deny.sh
echo "lint: workflows (actions pinned by commit, no cache, no curl | sh, --ignore-scripts, --locked)"
bash scripts/lib/check-workflows.sh --self-test
bash scripts/lib/check-workflows.sh .github/workflows/*.yml
echo "lint: gofmt, go vet (dev/cluster)"
# The same flags as cluster.sh's builds, so vet reuses their compiled packages.
unformatted=$(cd dev/cluster && gofmt -l cmd)
if [[ -n $unformatted ]]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi
(cd dev/cluster && CGO_ENABLED=0 go vet -trimpath ./...)
echo "lint: nodeexec's own tests (go test; its namespace test needs root)"
(cd dev/cluster && CGO_ENABLED=0 go test -trimpath -count=1 ./cmd/nodeexec)
echo "lint: js/ and index.js (tsc --checkJs, tsconfig.json)"
npx tsc -p tsconfig.json
echo "lint: index.d.ts (tsc)"
npx tsc -p __test__/tsconfig.json
echo "lint: the committed loader is what napi generates"
# native.cjs / native.d.ts are committed (the release's publish job packs them
# without building); every `napi build` rewrites them.
if [[ -f agent-sandbox-provider.linux-x64-gnu.node ]] && ! git diff --quiet -- native.cjs native.d.ts; then
	echo "native.cjs or native.d.ts differ from what the last napi build generated: commit them" >&2
	exit 1
fi
