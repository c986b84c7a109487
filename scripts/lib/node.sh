# shellcheck shell=bash
# Sourced by test.sh and test-node-matrix.sh: node_bin, the Node.js release
# binaries the Node project publishes to npm as node-linux-<arch> (what the
# `node` package installs), fetched with `npm pack` (the registry's sha512
# checked) and cached by version under AGENT_SANDBOX_CACHE.
# shellcheck source=cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"

# The test command's Node: the current LTS (Node 26 became LTS on 2026-10-28;
# Node 20 reached its end of life in April 2026, and @rivet-dev/sandbox-adapter
# needs >= 22.19). Pinned with the sha512 the registry gives each tarball; the
# other supported majors (22, 24) are test-node-matrix.sh's; package.json's
# `engines` is the adapter's own `>=22.19.0`.
NODE_LTS=26.12.1
declare -A NODE_LTS_SHA512=(
	[x64]=sha512-jk5LMAmgHlPlPMWpsUrSOqNaEZG+11UNd35hWQ+p5/XGaelWuTqJ69IcAy/5xtPPN4d5ZRBNOGB6gLMCh2kL9A==
	[arm64]=sha512-8Oxs6Y7rDcKufVIM/zYRSwytj46WOrZk7yFCLTKDcs17bBjAeD9HMAqo97hMfMyxozIud0S4vZCs5WB/3iavNQ==
)

# node_bin VERSION: prints the bin dir of Node VERSION, a major (its newest
# release when first fetched; the cached one after) or an exact version
# (NODE_LTS: checked against NODE_LTS_SHA512), fetching it when missing.
node_bin() {
	local spec=$1 arch dir
	case $(uname -m) in
	x86_64) arch=x64 ;;
	aarch64) arch=arm64 ;;
	*) echo "node_bin: no Node binaries for $(uname -m) on npm" >&2; return 1 ;;
	esac
	if [[ $spec == *.* ]]; then
		dir=$AGENT_SANDBOX_CACHE/node-v$spec-linux-$arch
	else
		dir=$(ls -d "$AGENT_SANDBOX_CACHE"/node-v"$spec".*-linux-"$arch" 2>/dev/null | sort -V | tail -1 || true)
	fi
	if [[ -z $dir || ! -x $dir/bin/node ]]; then
		local expected=
		[[ $spec == "$NODE_LTS" ]] && expected=${NODE_LTS_SHA512[$arch]}
		dir=$(fetch_node "node-linux-$arch@$spec" "$expected" "$arch") || return 1
	fi
	printf '%s\n' "$dir/bin"
}

# fetch_node PACKAGE@VERSION SHA512 ARCH: unpacks the package into the cache
# (renamed into place when complete: two fetches at once keep one) and prints
# its dir; refuses a tarball whose integrity is not SHA512 (when given).
fetch_node() (
	spec=$1 expected=$2 arch=$3
	mkdir -p "$AGENT_SANDBOX_CACHE"
	tmp=$(mktemp -d "$AGENT_SANDBOX_CACHE/node.tmp.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "fetching Node ($spec) from npm into $AGENT_SANDBOX_CACHE" >&2
	integrity=$(cd "$tmp" && npm pack --json --silent "$spec" | sed -n 's/^ *"integrity": "\(.*\)",\{0,1\}$/\1/p')
	if [[ -n $expected && $integrity != "$expected" ]]; then
		echo "fetch_node: $spec has integrity $integrity, expected $expected" >&2
		exit 1
	fi
	tar -xzf "$tmp"/node-linux-*.tgz -C "$tmp"
	version=$("$tmp/package/bin/node" --version) || exit 1
	dir=$AGENT_SANDBOX_CACHE/node-$version-linux-$arch
	mv -T "$tmp/package" "$dir" 2>/dev/null || [[ -x $dir/bin/node ]] || exit 1
	printf '%s\n' "$dir"
)
