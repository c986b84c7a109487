# shellcheck shell=sh
# Writes to or closes a process's stdin (process/scripts.rs: STDIN). $1 id,
# $2 `write` ($3 bytes follow on stdin) or `close`.
#
# needs: lib-record.sh

# Exit statuses: script_exit.rs (STDIN_NOT_OPEN, STDIN_CLOSED, PROCESS_EXITED).
[ "$stdin_holder" = - ] && exit 89
[ -e "$process_dir/0.c" ] && exit 88
[ -f "$process_dir/x" ] && exit 87
# The FIFO `0` stays open for writing in the stdin holder (a sleep) as long
# as stdin is open: ending it gives the process EOF.
if [ "$2" = close ]; then : >"$process_dir/0.c"; kill "$stdin_holder" 2>/dev/null; exit 0; fi
# Opened read-write, so that the open never blocks.
exec 4<>"$process_dir/0"
head -c "$3" >&4
