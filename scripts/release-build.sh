#!/usr/bin/env bash
# Release builds of the addon for the four Linux targets, on one x86_64 Linux
# machine that reaches only the package registries (no rustup targets):
# zig + cargo-zigbuild from PyPI link for each target with glibc 2.17 as the
# floor, and std is built from Debian's rust-src for the exact rustc version
# (cargo -Z build-std). Tools are cached by version under
# $AGENT_SANDBOX_CACHE (zig and cargo-zigbuild installed with
# pip --require-hashes from scripts/lib/release-requirements.txt, rust-src
# through apt's signed archive); artifacts land in npm/<platform>/.
#
#   bash scripts/release-build.sh                 all four targets
#   bash scripts/release-build.sh linux-arm64-gnu one of them
#
# Then `bash scripts/release-build.sh check` verifies each artifact: its ELF
# machine, and for gnu targets that no symbol needs a glibc newer than 2.17.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/release-tools.sh
source "$ROOT/scripts/lib/release-tools.sh"
GLIBC_FLOOR=2.17
RUSTC_VERSION=$(rustc --version | awk '{print $2}')
RUST_SRC=$CACHE/rust-src-$RUSTC_VERSION
# A target dir of this checkout's own (scripts/lib/cargo-env.sh says why),
# apart from the dev one: RUSTC_BOOTSTRAP changes every crate's fingerprint,
# so sharing the dev target dir would rebuild both each time.
# shellcheck source=lib/target-dir.sh
source "$ROOT/scripts/lib/target-dir.sh"
CARGO_TARGET_DIR=$(checkout_target_dir cargo-targets-release "$CACHE/cargo-target-release")
export CARGO_TARGET_DIR

declare -A TRIPLE=(
	[linux-x64-gnu]=x86_64-unknown-linux-gnu
	[linux-arm64-gnu]=aarch64-unknown-linux-gnu
	[linux-x64-musl]=x86_64-unknown-linux-musl
	[linux-arm64-musl]=aarch64-unknown-linux-musl
)
declare -A MACHINE=([x64]="X86-64" [arm64]="AArch64")
ALL=(linux-x64-gnu linux-arm64-gnu linux-x64-musl linux-arm64-musl)

log() { printf '[release] %s\n' "$*" >&2; }

tools() {
	if [[ ! -x $TOOLS/venv/bin/cargo-zigbuild ]]; then
		log "installing zig $ZIG_VERSION and cargo-zigbuild $ZIGBUILD_VERSION from PyPI (hashes checked)"
		# Built in place (a venv's scripts name their interpreter by path), removed if it fails.
		# Only the wheels whose sha256 the requirements file lists are accepted.
		rm -rf "$TOOLS" && python3 -m venv "$TOOLS/venv"
		"$TOOLS/venv/bin/pip" install -q --require-hashes --only-binary :all: -r "$RELEASE_REQUIREMENTS" ||
			{ rm -rf "$TOOLS"; exit 1; }
	fi
	if [[ ! -d $RUST_SRC/library ]]; then
		log "fetching Debian's rust-src for rustc $RUSTC_VERSION"
		local apt=$CACHE/apt-rust-src
		private_apt "$apt" trixie-backports trixie
		local version
		version=$(apt-cache madison rust-src | awk -v v="$RUSTC_VERSION+" 'index($3, v) == 1 {print $3; exit}')
		[[ -n $version ]] || { log "no rust-src $RUSTC_VERSION in trixie(-backports)"; exit 1; }
		(cd "$apt" && rm -f rust-src_*.deb && apt-get download -qq "rust-src=$version")
		rm -rf "$RUST_SRC.tmp" && mkdir -p "$RUST_SRC.tmp"
		dpkg -x "$apt"/rust-src_*.deb "$RUST_SRC.tmp"
		mv "$RUST_SRC.tmp/usr/src/rustc-$RUSTC_VERSION" "$RUST_SRC" && rm -rf "$RUST_SRC.tmp"
	fi
}

build() {
	local platform=$1 triple=${TRIPLE[$1]} zig_target=${TRIPLE[$1]}
	# zig links gnu targets against the glibc version named in the suffix.
	[[ $platform == *-gnu ]] && zig_target=$triple.$GLIBC_FLOOR
	log "building $platform ($zig_target)"
	local t0=$SECONDS rustflags=""
	# A Node addon is loaded into a dynamically linked process: no static CRT on musl.
	[[ $platform == *-musl ]] && rustflags="-C target-feature=-crt-static"
	(
		cd "$ROOT"
		export PATH=$TOOLS/venv/bin:$PATH RUSTC_BOOTSTRAP=1 RUSTFLAGS=$rustflags
		# cargo's build-std reads the library source from here (what cross-build.md found to work).
		export __CARGO_TESTS_ONLY_SRC_ROOT=$RUST_SRC/library
		cargo zigbuild --release --locked -p agent-sandbox-provider --target "$zig_target" -Z build-std
	)
	cp "$CARGO_TARGET_DIR/$triple/release/libagent_sandbox_provider.so" \
		"$ROOT/npm/$platform/agent-sandbox-provider.$platform.node"
	log "$platform built in $((SECONDS - t0)) s"
}

check() {
	local platform node status=0
	for platform in "${ALL[@]}"; do
		node=$ROOT/npm/$platform/agent-sandbox-provider.$platform.node
		if [[ ! -f $node ]]; then
			log "$platform: not built"
			status=1
			continue
		fi
		local arch=${platform#linux-}; arch=${arch%-*}
		if ! readelf -h "$node" | grep -q "Machine:.*${MACHINE[$arch]}"; then
			log "$platform: wrong ELF machine"
			status=1
		fi
		if [[ $platform == *-gnu ]]; then
			local newest
			newest=$(objdump -T "$node" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
			if [[ $(printf '%s\n' "GLIBC_$GLIBC_FLOOR" "$newest" | sort -V | tail -1) != "GLIBC_$GLIBC_FLOOR" ]]; then
				log "$platform: needs $newest, more than the floor glibc $GLIBC_FLOOR"
				status=1
			else
				log "$platform: ok (newest glibc symbol $newest)"
			fi
		else
			log "$platform: ok ($(readelf -d "$node" | grep -c NEEDED) needed libraries)"
		fi
	done
	return $status
}

case ${1:-all} in
check) check ;;
all)
	tools
	for p in "${ALL[@]}"; do build "$p"; done
	check
	;;
*)
	[[ -n ${TRIPLE[$1]:-} ]] || { log "unknown platform $1 (one of: ${ALL[*]})"; exit 2; }
	tools
	build "$1"
	;;
esac
