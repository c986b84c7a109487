# shellcheck shell=bash
# Sourced by the scripts that build Rust (test.sh, lint.sh, deny.sh, demo.sh;
# bench/ asks it too): exports CARGO_TARGET_DIR, a target dir outside the
# checkout that belongs to this checkout alone, unless CARGO_TARGET_DIR is
# already set (then it is the caller's to keep per checkout).
#
# Why one per checkout: cargo fingerprints a workspace crate by its path
# relative to the workspace and by mtimes, so two checkouts at different paths
# sharing a target dir share compiled crates: building checkout B after a
# fresh clone A reused A's crates, in-pod scripts included, wherever B's
# files were older than A's build (a stale shell wrapper in the addon hung a
# terminal test).
#
# Why seeded: a new checkout's dir starts as a copy of the most recently used
# one (cp --reflink=auto: shared blocks where the file system can), so a fresh
# clone on a machine that built before compiles only this workspace's crates,
# not its ~300 dependencies; the copy's outputs of the workspace's own crates
# are deleted first, so nothing of the other checkout survives.
# shellcheck source=target-dir.sh
source "$(dirname "${BASH_SOURCE[0]}")/target-dir.sh"

if [[ -z ${CARGO_TARGET_DIR:-} ]]; then
	CARGO_TARGET_DIR=$(dev_target_dir)
fi
export CARGO_TARGET_DIR
