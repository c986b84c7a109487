# shellcheck shell=sh
# The start of every script about one process, $1 its id: finds its
# directory and reads its record, or prints `gone` and exits. Then
# print_state prints the state line `<exit token or -> <waiter alive 0|1>
# <cap>` that read.sh and wait.sh begin with.
#
# needs: ../../exec/sh/lib-proc.sh lib-status.sh
# minify: proc_root=b process_dir=d print_state=hd process_pid=G stdin_holder=h output_cap=cap

proc_root=${TMPDIR:-/tmp}/.agent-sandbox/proc
process_dir=$proc_root/$1

print_state() {
	read_exit_token "$process_dir"
	check_waiter
	echo "$exit_token $waiter_alive $output_cap"
}

[ -d "$process_dir" ] && [ ! -L "$process_dir" ] && [ ! -L "$proc_root" ] && [ -O "$proc_root" ] || { echo gone; exit 0; }
# A record that is not a regular file (a FIFO would block the read until a
# writer comes) is no record.
[ -f "$process_dir/p" ] || { echo gone; exit 0; }
# `<pid> <waiter pid> <waiter start> <relay> <relay> <stdin holder or -> <cap> <started ms> <command bytes>`
read -r process_pid waiter_pid waiter_start _ _ stdin_holder output_cap _ _ <"$process_dir/p" || { echo gone; exit 0; }
all_digits "$process_pid" "$waiter_pid" "$waiter_start" "$output_cap" || { echo gone; exit 0; }
[ "$stdin_holder" = - ] || all_digits "$stdin_holder" || stdin_holder=-
# MAX_CAP (process/stream.rs): sequences stay exact JS numbers.
[ "$output_cap" -le 67108864 ] || output_cap=67108864
