# shellcheck shell=sh
# minify: make_private_dir=od dir_path=Y

# Makes directory $1 and its parent private (mode 700) where missing, and
# succeeds only when both are real directories of the running user, not
# symlinks: a sandbox that points the provider's directories at its
# workspace gets no record written, read or removed there.
# Judged, made where missing, judged again: every exec runs this, and a
# directory that exists costs no process start (mkdir is not a builtin); the
# first execs into a fresh pod run it at once, and a mkdir that loses the race
# to another exec's has still got the directory it needs.
make_private_dir() {
	for dir_path in "${1%/*}" "$1"; do
		[ -d "$dir_path" ] || mkdir -m 700 "$dir_path" 2>/dev/null
		[ -d "$dir_path" ] && [ ! -L "$dir_path" ] && [ -O "$dir_path" ] || return 1
	done
}
