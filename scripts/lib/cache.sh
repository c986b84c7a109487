# shellcheck shell=bash
# Sourced by every script that caches something outside the checkout (tools,
# Node binaries, the control plane's binaries, Rust target dirs): the one
# cache root, AGENT_SANDBOX_CACHE (docs/development.md, "Caches"). Every cached entry is
# keyed by what it was built from, so one root serves every checkout.
export AGENT_SANDBOX_CACHE=${AGENT_SANDBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-sandbox-provider}
