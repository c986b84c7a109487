#!/usr/bin/env bash
# cargo deny over Cargo.lock with the policy of deny.toml (issue 18 item 7):
# licenses, bans and sources always; advisories when RustSec's database can be
# fetched. Run by scripts/lint.sh; on its own: `bash scripts/deny.sh`.
#
# The advisory database is a git repository on GitHub, which these machines
# and their CI cannot reach (only the package registries): there the
# advisories check is skipped with a message saying so, and the other three
# still run. CARGO_DENY_ADVISORIES changes that:
#   auto      (default) check advisories if the database can be fetched
#   required  fail if it cannot (the release workflow, on GitHub's runners)
#   skip      do not try
#
# cargo-deny itself is built once per machine with `cargo install --locked`
# (its own Cargo.lock, every crate checked against crates.io's checksums) and
# kept under $AGENT_SANDBOX_CACHE/cargo-deny-<version>: building it
# takes several minutes on 2 cores, a cached run about two seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/lib/cargo-env.sh

CACHE=$AGENT_SANDBOX_CACHE
CARGO_DENY_VERSION=0.20.2
CARGO_DENY_ROOT=$CACHE/cargo-deny-$CARGO_DENY_VERSION
CARGO_DENY=$CARGO_DENY_ROOT/bin/cargo-deny

if [[ ! -x $CARGO_DENY ]]; then
	echo "deny: building cargo-deny $CARGO_DENY_VERSION (once per machine; several minutes)"
	mkdir -p "$CACHE"
	# A directory of this run's own, renamed into place when complete: a
	# failed build leaves nothing behind, and two runs at once (other
	# checkouts on the machine) do not write into one directory. Its own
	# target dir too: the one of cargo-env.sh is this checkout's.
	tmp=$(mktemp -d "$CARGO_DENY_ROOT.XXXXXX") && chmod 755 "$tmp"
	trap 'rm -rf "$tmp"' EXIT
	cargo install --quiet --locked cargo-deny --version "=$CARGO_DENY_VERSION" \
		--root "$tmp" --target-dir "$tmp/target"
	rm -rf "$tmp/target"
	mv -T "$tmp" "$CARGO_DENY_ROOT" 2>/dev/null || [[ -x $CARGO_DENY ]]
fi
if [[ $("$CARGO_DENY" --version) != "cargo-deny $CARGO_DENY_VERSION" ]]; then
	echo "deny: $CARGO_DENY is not cargo-deny $CARGO_DENY_VERSION; remove $CARGO_DENY_ROOT to rebuild it" >&2
	exit 1
fi

# --locked: the graph is Cargo.lock's, and the check fails if it is stale.
"$CARGO_DENY" --locked check licenses bans sources

mode=${CARGO_DENY_ADVISORIES:-auto}
case $mode in
skip)
	echo "deny: advisories skipped (CARGO_DENY_ADVISORIES=skip)"
	;;
auto | required)
	log=$(mktemp)
	if timeout 300 "$CARGO_DENY" --locked fetch db >"$log" 2>&1; then
		rm -f "$log"
		"$CARGO_DENY" --locked --offline check advisories
	elif [[ $mode == required ]]; then
		cat "$log" >&2
		rm -f "$log"
		echo "deny: the advisory database could not be fetched (CARGO_DENY_ADVISORIES=required)" >&2
		exit 1
	else
		reason=$(grep -m1 -o 'fatal: .*' "$log" | cut -c8- || true)
		[[ -n $reason ]] || reason=$(grep -m1 . "$log" || true)
		rm -f "$log"
		echo "deny: advisories NOT checked: RustSec's advisory database (github.com/RustSec/advisory-db) cannot be fetched from this machine${reason:+ ($reason)}; licenses, bans and sources were. CARGO_DENY_ADVISORIES=required makes this an error where GitHub is reachable (the release workflow does)."
	fi
	;;
*)
	echo "deny: CARGO_DENY_ADVISORIES must be auto, required or skip, not '$mode'" >&2
	exit 2
	;;
esac
