# shellcheck shell=sh
# Writes a file (files/scripts.rs: WRITE). $1 path, $2 byte count on stdin.
# Writes a temporary file next to the target (the same filesystem; its name
# does not grow with the target's, so a 255-byte name still fits), checks
# its size, keeps an existing file's mode and renames it over the target:
# readers never see a partial file. A symlink is written through, like
# fs.writeFile. `head -c` gives EOF after exactly $2 bytes.
#
# minify: file_path=p byte_count=n target_path=t parent_dir=d temp_file=T written_size=s

file_path=$1
byte_count=$2
case $file_path in -*) file_path=./$file_path;; esac
if [ -L "$file_path" ]; then target_path=$(readlink -f -- "$file_path") && file_path=$target_path; fi
[ -d "$file_path" ] && exit 92
case $file_path in */*) parent_dir=${file_path%/*}; parent_dir=${parent_dir:-/};; *) parent_dir=.;; esac
[ -d "$parent_dir" ] || exit 91
temp_file=$parent_dir/.agent-sandbox-write.$$.tmp
if [ "$byte_count" -gt 0 ]; then head -c "$byte_count" >"$temp_file"; else : >"$temp_file"; fi || { rm -f -- "$temp_file"; exit 1; }
written_size=$(stat -c %s -- "$temp_file" 2>/dev/null || wc -c <"$temp_file")
[ "$written_size" = "$byte_count" ] || { rm -f -- "$temp_file"; exit 95; }
[ -f "$file_path" ] && chmod --reference="$file_path" -- "$temp_file" 2>/dev/null
mv -f -- "$temp_file" "$file_path" || { rm -f -- "$temp_file"; exit 1; }
