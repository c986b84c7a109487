#!/usr/bin/env bash
# The JS integration suite on the supported Node majors other than the test
# command's (scripts/test.sh runs it on the current LTS, NODE_LTS in
# scripts/lib/node.sh): 22 and 24 by default, any major or exact version on
# request. The official binaries from npm's node-linux-<arch> packages, cached
# by version (scripts/lib/node.sh). Against the local cluster
# (`dev/cluster/cluster.sh up` first) and the addon already built.
#
#   bash scripts/test-node-matrix.sh                 Node 22 and 24, every test file
#   bash scripts/test-node-matrix.sh 22 26 -- __test__/exec.test.mjs
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/node.sh
source "$ROOT/scripts/lib/node.sh"
versions=() files=()
while (($#)); do
	if [[ $1 == -- ]]; then shift; files=("$@"); break; fi
	versions+=("$1"); shift
done
((${#versions[@]})) || versions=(22 24)
((${#files[@]})) || files=("$ROOT"/__test__/*.test.mjs)

status=0
for v in "${versions[@]}"; do
	bin=$(node_bin "$v")
	echo "[node-matrix] Node $("$bin/node" --version): ${files[*]}" >&2
	if (cd "$ROOT" && PATH=$bin:$PATH node --test --test-concurrency=1 "${files[@]}"); then
		echo "[node-matrix] Node $v passed" >&2
	else
		echo "[node-matrix] Node $v FAILED" >&2
		status=1
	fi
done
exit $status
