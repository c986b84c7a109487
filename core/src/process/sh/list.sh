# shellcheck shell=sh
# Lists processes (process/scripts.rs: LIST). $1 an id to list only that one
# (empty: all), $2 most entries, $3 most bytes of each command. Prints per
# process a line `<id> <pid> <started ms> <exit token or -> <waiter alive
# 0|1>`, then the head of its command text and a NUL (commands hold no NUL);
# `more` after $2 entries; a line `.` at the end. Linear in the number of
# processes (two or three `head`s each), whatever the sandbox left in the
# directory: every file is read through `head -c`, so a forged one of any
# size costs no more than a real one (the `read` builtin takes a byte per
# system call: minutes for a GiB without a newline). The command text may
# still hold anything, NULs too: the reader (process/mod.rs) copes.
#
# needs: lib-status.sh
# minify: proc_root=b entries_left=N record_file=F process_id=i process_pid=G started_ms=at
# minify: read_record=rr record_fields=rf record_text=rt

proc_root=${TMPDIR:-/tmp}/.agent-sandbox/proc
[ ! -L "$proc_root" ] && [ -O "$proc_root" ] && cd "$proc_root" 2>/dev/null || { echo .; exit 0; }
entries_left=$2

# Sets the fields of record $1 (process/scripts.rs lists them) from its first
# 256 bytes; fails unless there are exactly nine. Unquoted on purpose, with
# globbing off: a forged `*` stays a word.
read_record() {
	record_text=$(head -c 256 -- "$1" 2>/dev/null) || return 1
	set -f
	record_fields $record_text
	set +f
	[ -n "$started_ms" ]
}
record_fields() {
	started_ms=
	[ $# -eq 9 ] || return 0
	process_pid=$1 waiter_pid=$2 waiter_start=$3 started_ms=$8
}
# Unquoted on purpose: `*`, or the one id, is a glob.
for record_file in ${1:-*}/p; do
	[ -f "$record_file" ] || continue
	process_id=${record_file%/p}
	case $process_id in *[!0-9a-f]*) continue;; esac
	[ ${#process_id} -eq 20 ] || continue
	read_record "$record_file" || continue
	all_digits "$process_pid" "$waiter_pid" "$waiter_start" "$started_ms" || continue
	[ "$entries_left" -gt 0 ] || { echo more; exit 0; }
	entries_left=$((entries_left-1))
	read_exit_token "$process_id"
	check_waiter
	echo "$process_id $process_pid $started_ms $exit_token $waiter_alive"
	# Not a FIFO: its open would wait for a writer.
	[ -f "$process_id/c" ] && head -c "$3" -- "$process_id/c" 2>/dev/null
	printf '\0'
done
echo .
