# shellcheck shell=sh
# Reads a file, or a range of it (files/scripts.rs: READ). $1 path, $2 byte
# limit, $3 offset, $4 length (empty: to the end). Prints the file's size on
# a line of its own, then the bytes of the range (none when it starts at or
# past the end). Exit codes: files/scripts.rs.
#
# minify: file_path=p range_offset=o file_size=s range_bytes=r

file_path=$1
range_offset=$3
# A path starting with `-` is no option to any tool.
case $file_path in -*) file_path=./$file_path;; esac
[ -d "$file_path" ] && exit 92
[ -e "$file_path" ] || exit 91
# A FIFO would block, a device never end: refused before anything is read.
[ -f "$file_path" ] || exit 96
file_size=$(stat -L -c %s -- "$file_path" 2>/dev/null || wc -c <"$file_path") || exit 1
echo "$file_size"
case $file_size in ''|*[!0-9]*) exit 1;; esac
[ "$range_offset" -ge "$file_size" ] && exit 0
range_bytes=$((file_size-range_offset))
[ -n "$4" ] && [ "$4" -lt "$range_bytes" ] && range_bytes=$4
# Over the limit: refused before it is read (a file that grows past the limit
# while it is read is stopped by the engine).
[ "$range_bytes" -gt "$2" ] && exit 94
[ "$range_offset" -eq 0 ] && [ -z "$4" ] && exec cat -- "$file_path"
# `tail -c +N` seeks in a regular file (GNU tail): a range deep into a large
# or sparse file costs no read of what comes before it.
exec <"$file_path" || exit 1
tail -c +$((range_offset+1)) | head -c "$range_bytes"
