# shellcheck shell=sh
# Lists a directory (files/scripts.rs: READDIR). $1 path, $2 most entries to
# print. Prints each entry's name and a NUL (names hold any byte but NUL and
# `/`). A glob in the directory itself: no `find -printf` or `ls` output to
# parse, no path prefix to strip.
#
# minify: dir_path=p entries_left=m each_name=f

dir_path=$1
entries_left=$2
case $dir_path in -*) dir_path=./$dir_path;; esac
[ -e "$dir_path" ] || exit 91
[ -d "$dir_path" ] || exit 93
cd -- "$dir_path" || exit 1
for each_name in * .*; do
	case $each_name in .|..) continue;; esac
	# An empty directory leaves the patterns themselves; a dangling symlink
	# is an entry.
	[ -e "$each_name" ] || [ -L "$each_name" ] || continue
	printf '%s\0' "$each_name"
	entries_left=$((entries_left-1))
	[ "$entries_left" -gt 0 ] || break
done
