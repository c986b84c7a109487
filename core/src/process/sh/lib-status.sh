# shellcheck shell=sh
# How a spawned process stands, from its directory (process/scripts.rs lists
# the files). The record and `x` are the sandbox's to rewrite: every value is
# checked before it is used.
#
# needs: ../../exec/sh/lib-proc.sh
# minify: read_exit_token=xt exit_token=E check_waiter=wa waiter_alive=W waiter_pid=w waiter_start=ws

# Sets exit_token to what `x` in directory $1 says (the exit status,
# `timeout`, or `s<n>` for a signal the provider sent), `-` while the process
# runs or for anything else. At most 16 bytes of it: a forged `x` of any size
# costs one `head` (`read` would take a byte per system call).
read_exit_token() {
	exit_token=-
	[ -f "$1/x" ] && { exit_token=$(head -c 16 -- "$1/x" 2>/dev/null) || exit_token=-; }
	case $exit_token in timeout|s[1-9]|s[1-9][0-9]) ;; *) all_digits "$exit_token" || exit_token=-;; esac
}

# Sets waiter_alive to 1 when the process's waiter (waiter_pid, started at
# waiter_start) still runs, else 0.
check_waiter() {
	waiter_alive=0
	read_start_time "$waiter_pid" && [ "$start_time" = "$waiter_start" ] && waiter_alive=1
}
