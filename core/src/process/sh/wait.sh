# shellcheck shell=sh
# Waits until a process's waiter is gone, then prints the state line
# (process/scripts.rs: WAIT). $1 id.
#
# needs: lib-record.sh

read_start_time "$waiter_pid" && [ "$start_time" = "$waiter_start" ] && tail -f -s 0.2 --pid="$waiter_pid" /dev/null 2>/dev/null
print_state
