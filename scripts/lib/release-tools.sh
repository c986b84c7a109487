# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the scripts that source it
# Sourced by the release scripts (release-build.sh, test-cross.sh): the
# cross-build tools they share, cached by version, and private_apt.
# shellcheck source=cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"
CACHE=$AGENT_SANDBOX_CACHE
# zig and cargo-zigbuild: versions and wheel hashes in one place, the
# requirements file pip installs with --require-hashes.
RELEASE_REQUIREMENTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/release-requirements.txt
ZIG_VERSION=$(sed -n 's/^ziglang==\([^ ]*\).*/\1/p' "$RELEASE_REQUIREMENTS")
ZIGBUILD_VERSION=$(sed -n 's/^cargo-zigbuild==\([^ ]*\).*/\1/p' "$RELEASE_REQUIREMENTS")
# Keyed by the requirements file's own hash too, so a tool dir installed
# before the hashes were checked (or with other pins) is never reused.
TOOLS=$CACHE/xtools-zig$ZIG_VERSION-zigbuild$ZIGBUILD_VERSION-$(sha256sum "$RELEASE_REQUIREMENTS" | cut -c1-12)

# private_apt DIR SUITE...: an apt setup of
# its own under DIR (nothing system-wide changes) for this machine's Debian
# mirror with the given suites, amd64 and arm64 packages; exports
# APT_CONFIG and runs `apt-get update`. Packages are then fetched with
# `apt-get download` and unpacked with `dpkg -x`, never installed.
private_apt() {
	local dir=$1 suite uri
	shift
	mkdir -p "$dir"/{lists/partial,cache/archives/partial,etc}
	uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || echo http://deb.debian.org/debian)
	: >"$dir/etc/sources.list"
	for suite in "$@"; do
		echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $suite main" >>"$dir/etc/sources.list"
	done
	cat >"$dir/etc/apt.conf" <<-EOF
		Dir::State::Lists "$dir/lists";
		Dir::Cache "$dir/cache";
		Dir::Etc::SourceList "$dir/etc/sources.list";
		Dir::Etc::SourceParts "/nonexistent";
		APT::Architecture "amd64";
		APT::Architectures { "amd64"; "arm64"; };
	EOF
	export APT_CONFIG=$dir/etc/apt.conf
	apt-get update -qq 2>&1 | grep -v "unsandboxed as root" >&2 || true
}
