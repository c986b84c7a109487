# shellcheck shell=bash
# Sourced by cargo-env.sh and release-build.sh: checkout_target_dir, a Rust
# target dir of this checkout's own under the cache root (why: cargo-env.sh).
# shellcheck source=cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"

# dev_target_dir [ROOT]: the target dir of cargo-env.sh (and of `npm run
# build` from the scripts and bench/) for the checkout at ROOT, default this one.
dev_target_dir() {
	checkout_target_dir cargo-targets "$AGENT_SANDBOX_CACHE/cargo-target" "$@"
}

# checkout_target_dir KIND LEGACY [ROOT]: prints $AGENT_SANDBOX_CACHE/KIND/<key>,
# <key> a hash of the absolute path of ROOT (default: this checkout), and
# creates it on first use, seeded from the most recently used dir of KIND (or
# from LEGACY, the target dir every checkout shared before, when KIND has
# none yet). Marks it used.
checkout_target_dir() {
	local kind=$1 legacy=$2 root=${3:-$(dirname "${BASH_SOURCE[0]}")/../..} key parent dir
	root=$(cd "$root" && pwd -P)
	key=$(printf '%s' "$root" | sha256sum | cut -c1-16)
	parent=$AGENT_SANDBOX_CACHE/$kind
	dir=$parent/$key
	if [[ ! -f $dir/.checkout ]]; then
		mkdir -p "$parent"
		seed_target_dir "$root" "$dir" "$parent" "$legacy" >&2 || return 1
	fi
	touch "$dir/.used"
	printf '%s\n' "$dir"
}

# seed_target_dir ROOT DIR PARENT LEGACY: creates DIR (see above) in a
# private directory renamed into place, so two first uses at once leave one
# complete dir and a failed copy leaves nothing. Dirs of checkouts that no
# longer exist are removed on the way.
seed_target_dir() (
	root=$1 dir=$2 parent=$3 legacy=$4
	tmp=$(mktemp -d "$dir.tmp.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	for other in "$parent"/*/; do
		other=${other%/}
		[[ -f $other/.checkout && ! -d $(<"$other/.checkout") ]] || continue
		echo "cargo-env: removing $other, the target dir of $(<"$other/.checkout"), which is gone"
		rm -rf "$other"
	done
	# Most recently used first (cargo-env.sh marks its dir each time it is
	# sourced); the legacy shared dir last.
	mapfile -t seeds < <(ls -t "$parent"/*/.used 2>/dev/null | sed 's:/\.used$::')
	[[ -n $legacy && -d $legacy ]] && seeds+=("$legacy")
	for seed in "${seeds[@]}"; do
		# Only a dir something was built in (cargo's lock in a profile dir).
		if [[ $seed == "$dir" ]] || ! compgen -G "$seed/*/.cargo-lock" >/dev/null; then continue; fi
		if copy_idle_target_dir "$seed" "$tmp"; then
			echo "cargo-env: $dir seeded from $seed"
			forget_workspace_crates "$root" "$tmp"
			break
		fi
		echo "cargo-env: not seeding from $seed (a build runs in it)"
		find "$tmp" -mindepth 1 -delete
	done
	printf '%s\n' "$root" >"$tmp/.checkout"
	mv -T "$tmp" "$dir" 2>/dev/null || [[ -f $dir/.checkout ]]
)

# copy_idle_target_dir SRC DST: copies SRC into DST while no cargo builds in
# SRC (cargo holds <profile>/.cargo-lock with flock(2) for a whole build);
# fails at once, copying nothing, if one does.
copy_idle_target_dir() (
	src=$1 dst=$2
	for lock in "$src"/*/.cargo-lock "$src"/*/*/.cargo-lock; do
		[[ -f $lock ]] || continue
		exec {fd}<"$lock"
		flock -n -s "$fd" || exit 1
	done
	cp -a --reflink=auto "$src/." "$dst/"
	rm -f "$dst/.checkout" "$dst/.used"
)

# forget_workspace_crates ROOT DIR: deletes from target dir DIR everything
# cargo keeps of the packages whose manifests ROOT's git tracks (fingerprints,
# build-script outputs, compiled crates and tests, incremental state), so
# cargo builds them from ROOT's sources; registry dependencies stay.
forget_workspace_crates() {
	local root=$1 dir=$2 names=() manifest name
	while IFS= read -r manifest; do
		name=$(sed -n '/^\[package\]/,/^\[/s/^name *= *"\([^"]*\)".*/\1/p' "$root/$manifest")
		[[ -n $name ]] && names+=("$name" "${name//-/_}")
	done < <(git -C "$root" ls-files '*Cargo.toml' 'Cargo.toml')
	((${#names[@]})) || return 0
	local alternatives
	alternatives=$(IFS='|'; echo "${names[*]}")
	# <profile>/{.fingerprint,build,deps,incremental}/, also under a target
	# triple; uplifted outputs (<profile>/lib<crate>.so) are rewritten by the build.
	find "$dir" -maxdepth 4 -regextype posix-extended \
		-regex ".*/(\.fingerprint|build|deps|incremental)/(lib)?($alternatives)-[0-9a-z]+(\..*)?" \
		-prune -exec rm -rf {} +
}
