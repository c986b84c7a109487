# shellcheck shell=bash
# Sourced by the scripts that build Rust: one target dir outside the checkout,
# shared by test.sh, lint.sh, demo.sh and `npm run build` from them, so a
# fresh clone on a machine that built before does not rebuild from nothing
# (and the demo after the tests does not build the addon a second time).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-sandbox-provider/cargo-target}
