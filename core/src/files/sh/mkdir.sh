# shellcheck shell=sh
# Makes a directory and its parents, like `mkdir -p`: idempotent
# (files/scripts.rs: MKDIR). $1 path.
#
# minify: dir_path=p

dir_path=$1
case $dir_path in -*) dir_path=./$dir_path;; esac
[ -d "$dir_path" ] && exit 0
[ -e "$dir_path" ] && exit 93
mkdir -p -- "$dir_path"
