# shellcheck shell=sh
# Writes a directory's tree to stdout as a tar archive (transfer/scripts.rs:
# DOWNLOAD). Arguments come in the environment (data, never script text):
# transfer_dir, and transfer_excludes, one `--exclude` pattern a line.
# Names are stored as bytes (tar's default format, no PAX charset
# conversion); the provider checks the archive's structure and its end.
#
# minify: source_dir=d exclude_pattern=p
# shellcheck disable=SC2154

command -v tar >/dev/null 2>&1 || exit 97
source_dir=$transfer_dir
case $source_dir in -*) source_dir=./$source_dir;; esac
[ -e "$source_dir" ] || exit 91
[ -d "$source_dir" ] || exit 93
# One argument a line: split on newlines only, no globbing.
set -f
IFS=$(printf '\n_')
IFS=${IFS%_}
set --
for exclude_pattern in $transfer_excludes; do
	set -- "$@" "--exclude=$exclude_pattern"
done
# BusyBox tar has no --exclude (Debian's build has no -X either).
[ $# -gt 0 ] && ! tar --help 2>&1 | grep -q -e --exclude && exit 99
CDPATH='' cd -- "$source_dir" || exit 1
exec tar -c -f - "$@" .
