#!/usr/bin/env bash
# release-check-packages.sh PACKAGES DIGESTS: run by the release workflow's
# publish job before anything is published, on what the `pack` job made.
# `pack` runs @napi-rs/cli (a dev dependency) to lay the packages out; this
# check makes sure that whatever ran there, the tarballs hold exactly what
# was built, smoke-tested and committed:
#   - PACKAGES/platform/*.tgz: one per target of package.json's napi.targets,
#     each holding its package.json and README from npm/<platform>/ and the
#     binary whose sha256 is DIGESTS' line for that platform
#     ("<platform> <sha256>", one per line: the digests the build jobs
#     recorded as job outputs and the smoke jobs checked; not artifacts,
#     which any later job of the run could replace);
#   - PACKAGES/root/*.tgz: every file byte-identical to this checkout's, and
#     package.json equal to this checkout's but for optionalDependencies,
#     which must name exactly the platform packages at the same version.
# Needs only bash, tar, cmp, sha256sum and node (no npm package). Exits 1 on
# a mismatch.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
packages=$(cd "$1" && pwd)
digests=$2
[[ -f $digests ]] || { echo "release-check-packages: no digests file $digests" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
fail() {
	echo "release-check-packages: $*" >&2
	status=1
}

pkg_field() { node -p "require('$ROOT/package.json').$1"; }
name=$(pkg_field name)
version=$(pkg_field version)
binary=$(pkg_field napi.binaryName)
# platform suffixes, from the npm/ packages of this checkout
platforms=()
for dir in "$ROOT"/npm/*/; do platforms+=("$(basename "$dir")"); done
targets=$(node -p "require('$ROOT/package.json').napi.targets.length")
[[ ${#platforms[@]} == "$targets" ]] || fail "npm/ has ${#platforms[@]} packages, napi.targets $targets"

shopt -s nullglob
tarballs=("$packages"/platform/*.tgz)
[[ ${#tarballs[@]} == "${#platforms[@]}" ]] || fail "${#tarballs[@]} platform tarballs for ${#platforms[@]} platforms"

for platform in "${platforms[@]}"; do
	# npm pack's name: @scope/name@version -> scope-name-version.tgz
	base=${name#@}
	tgz=$packages/platform/${base//\//-}-$platform-$version.tgz
	if [[ ! -f $tgz ]]; then
		fail "no tarball ${tgz##*/} for $platform"
		continue
	fi
	dir=$work/$platform
	mkdir -p "$dir" && tar -xzf "$tgz" -C "$dir"
	file=$binary.$platform.node
	listed=$(cd "$dir/package" && find . -type f | sed 's|^\./||' | sort | paste -sd' ')
	[[ $listed == "README.md $file package.json" ]] || fail "$platform: tarball holds [$listed]"
	want=$(awk -v p="$platform" '$1 == p { print $2 }' "$digests")
	got=$(sha256sum "$dir/package/$file" 2>/dev/null | cut -d' ' -f1)
	[[ $want =~ ^[0-9a-f]{64}$ && $got == "$want" ]] ||
		fail "$platform: $file is not the binary its build job recorded (sha256 ${got:-none}, recorded ${want:-none})"
	for f in package.json README.md; do
		cmp -s "$dir/package/$f" "$ROOT/npm/$platform/$f" || fail "$platform: $f differs from npm/$platform/$f"
	done
done

roots=("$packages"/root/*.tgz)
if [[ ${#roots[@]} != 1 ]]; then
	fail "${#roots[@]} root tarballs, expected 1"
else
	mkdir -p "$work/root" && tar -xzf "${roots[0]}" -C "$work/root"
	while IFS= read -r f; do
		[[ $f == package.json ]] && continue
		cmp -s "$work/root/package/$f" "$ROOT/$f" || fail "root package: $f differs from the checkout"
	done < <(cd "$work/root/package" && find . -type f | sed 's|^\./||')
	node -e '
		const [packed, source, platforms] = [require(process.argv[1]), require(process.argv[2]), process.argv.slice(3)];
		const want = Object.fromEntries(platforms.map((p) => [`${source.name}-${p}`, source.version]));
		const got = packed.optionalDependencies ?? {};
		const sorted = (o) => JSON.stringify(Object.entries(o).sort());
		let ok = true;
		if (sorted(got) !== sorted(want)) { console.error(`root package: optionalDependencies ${sorted(got)}, expected ${sorted(want)}`); ok = false; }
		delete packed.optionalDependencies;
		delete source.optionalDependencies;
		if (JSON.stringify(packed) !== JSON.stringify(source)) { console.error("root package: package.json differs from the checkout beyond optionalDependencies"); ok = false; }
		process.exit(ok ? 0 : 1);
	' "$work/root/package/package.json" "$ROOT/package.json" "${platforms[@]}" || status=1
fi

if [[ $status == 0 ]]; then
	echo "release-check-packages: ${#platforms[@]} platform packages and the root package of $name@$version hold what was built and committed"
fi
exit $status
