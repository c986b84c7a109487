# shellcheck shell=sh
# Extracts an archive into a directory (transfer/scripts.rs: UPLOAD).
# Arguments come in the environment (data, never script text):
# transfer_dir, transfer_overwrite (1 or 0). Stdin is the archive in frames,
# each `<length>\n` then that many bytes, and `0\n` at the end: the exec
# cannot send EOF, so the frames say where the archive ends, and nothing
# is left unread. The archive was checked and re-encoded by the provider
# (no absolute names, no `..`, no devices, no links out); `-o` keeps
# ownership out (GNU and BusyBox alike) and `-p` keeps modes exact.
#
# minify: target_dir=d each_entry=e frame_bytes=n
# shellcheck disable=SC2154

command -v tar >/dev/null 2>&1 || exit 97
target_dir=$transfer_dir
case $target_dir in -*) target_dir=./$target_dir;; esac
[ -e "$target_dir" ] && [ ! -d "$target_dir" ] && exit 93
mkdir -p -- "$target_dir" || exit 1
if [ "$transfer_overwrite" = 0 ]; then
	for each_entry in "$target_dir"/* "$target_dir"/.[!.]* "$target_dir"/..?*; do
		{ [ -e "$each_entry" ] || [ -L "$each_entry" ]; } && exit 98
	done
fi
while read -r frame_bytes && [ "$frame_bytes" != 0 ]; do
	head -c "$frame_bytes" || exit 1
done | tar -x -o -p -f - -C "$target_dir"
