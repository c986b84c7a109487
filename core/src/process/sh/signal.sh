# shellcheck shell=sh
# Signals a process's whole tree (process/scripts.rs: SIGNAL). $1 id, $2 a
# signal name, or `terminate`: TERM, 2 s of grace, KILL. The tree: the
# process, every process carrying its marker, and their descendants
# (grandchildren whose parent died included). A signal other than STOP and
# CONT first leaves `k`, so the waiter records a death by signal as the
# provider's doing (`s<n>` in `x`).
#
# needs: lib-record.sh ../../exec/sh/lib-kill.sh

kill_roots=
read_start_time "$process_pid" && kill_roots=" $process_pid:1"
kill_markers=" p$1:"
case $2 in STOP|CONT) ;; *) : >"$process_dir/k";; esac
if [ "$2" = terminate ]; then
	terminate_tree 20 TERM
else
	signal_tree "$2"
fi
exit 0
