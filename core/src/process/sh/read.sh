# shellcheck shell=sh
# Reads a process's output (process/scripts.rs: READ). $1 id, $2 stdout
# offset, $3 stderr offset, $4 `poll` (what is there now, at most $5 bytes of
# each stream) or `follow` (and then everything written until the waiter
# exits). Prints the state line, then the bytes of `1` from $2 on stdout and
# of `2` from $3 on stderr.
#
# needs: lib-record.sh

print_state
if [ "$4" = follow ] && [ "$waiter_alive" = 1 ]; then
	# `tail -f --pid` ends once the waiter has exited and the file is read
	# to its end.
	tail -c +$(($2+1)) -f -s 0.2 --pid="$waiter_pid" "$process_dir/1" 2>/dev/null &
	tail -c +$(($3+1)) -f -s 0.2 --pid="$waiter_pid" "$process_dir/2" 3>&2 2>/dev/null >&3 &
	wait
else
	tail -c +$(($2+1)) "$process_dir/1" 2>/dev/null | head -c "$5"
	tail -c +$(($3+1)) "$process_dir/2" 2>/dev/null | head -c "$5" >&2
fi
