# shellcheck shell=sh
# Whether a path exists, symlinks followed (files/scripts.rs: EXISTS). $1
# path; exit 0 if it does, 91 if not.
#
# minify: file_path=p

file_path=$1
case $file_path in -*) file_path=./$file_path;; esac
[ -e "$file_path" ] || exit 91
