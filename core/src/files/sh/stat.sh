# shellcheck shell=sh
# Describes a path's target, symlinks followed like fs.stat (files/scripts.rs:
# STAT). $1 path. Prints `<is-symlink 0|1> <st_mode hex> <size> <mtime
# seconds[.ms]>`; a stat without `%.3Y` gives whole seconds.
#
# minify: file_path=p

file_path=$1
case $file_path in -*) file_path=./$file_path;; esac
[ -e "$file_path" ] || exit 91
[ -L "$file_path" ] && printf '1 ' || printf '0 '
stat -L -c '%f %s %.3Y' -- "$file_path" 2>/dev/null || stat -L -c '%f %s %Y' -- "$file_path"
