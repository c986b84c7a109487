# shellcheck shell=sh
# Removes a path, like fs.rm (files/scripts.rs: REMOVE). $1 path, $2
# recursive (1/0), $3 force (1/0): a missing path is an error unless forced,
# a directory needs recursive. A symlink is removed, not its target.
#
# minify: file_path=p

file_path=$1
case $file_path in -*) file_path=./$file_path;; esac
if [ ! -e "$file_path" ] && [ ! -L "$file_path" ]; then [ "$3" = 1 ] && exit 0; exit 91; fi
[ -d "$file_path" ] && [ ! -L "$file_path" ] && [ "$2" != 1 ] && exit 92
rm -rf -- "$file_path"
