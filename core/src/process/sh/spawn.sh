# shellcheck shell=sh
# Starts a background process (process/scripts.rs: SPAWN says what the
# arguments and stdin hold; the module docs list the process's files).
# Prints `ok <pid>` once the command runs, or `cwd`, `rundir`, `short` (stdin
# incomplete) having started nothing. Also removes, in the background,
# exited processes past their retention.
#
# needs: ../../exec/sh/lib-fields.sh ../../exec/sh/lib-private-dir.sh ../../exec/sh/lib-kill.sh
# minify: process_id=i proc_root=b process_dir=d stdin_mode=m timeout_seconds=o output_cap=cap
# minify: relay_limit=L started_ms=at command_bytes=n spawn_flags=F env_count=j is_process_id=pi
# minify: work_dir=w command_text=u stdin_source=I env_program=J relay_to=y exited_count=C each_exit_file=D
# minify: relay_out_pid=r1 relay_err_pid=r2 stdin_holder=h process_pid=G timer_pid=k sleep_pid=B
# minify: exit_status=z write_record=wr waiter_pid=W

process_id=$1
proc_root=${TMPDIR:-/tmp}/.agent-sandbox/proc
process_dir=$proc_root/$process_id
stdin_mode=$2
timeout_seconds=$3
output_cap=$4
# The relays keep the cap and room for the trailer (MAX_TRAILER).
relay_limit=$(($4+64))
started_ms=$5
command_bytes=$6
spawn_flags=$7
env_count=$8

# Succeeds for a process id of the engine's form, 20 hex digits.
is_process_id() {
	case $1 in *[!0-9a-f]*) return 1;; esac
	[ ${#1} -eq 20 ]
}

read_field || { echo short; exit 0; }
work_dir=$field_value
read_field || { echo short; exit 0; }
command_text=$field_value
set --
while [ "$env_count" -gt 0 ]; do
	read_field || { echo short; exit 0; }
	set -- "$@" "$field_value"
	env_count=$((env_count-1))
done
# A long command follows the fields, then the id: one cut short is not run.
case $spawn_flags in *c*)
	command_text=$(head -c $((command_bytes+20)))
	case $command_text in *"$process_id") command_text=${command_text%"$process_id"};; *) echo short; exit 0;; esac;;
esac
if [ -n "$work_dir" ]; then CDPATH='' cd -- "$work_dir" 2>/dev/null || { echo cwd; exit 0; }; fi
make_private_dir "$proc_root" 2>/dev/null && mkdir -m 700 "$process_dir" 2>/dev/null || { echo rundir; exit 0; }
if [ "$stdin_mode" = open ]; then mkfifo "$process_dir/o" "$process_dir/e" "$process_dir/0"; else mkfifo "$process_dir/o" "$process_dir/e"; fi 2>/dev/null || { rm -rf -- "$process_dir"; echo rundir; exit 0; }
# The command's stdin: none, the FIFO for writeStdin, or the bytes sent now.
stdin_source=/dev/null
case $stdin_mode in '') ;;
open) stdin_source=$process_dir/0;;
*) stdin_source=$process_dir/i
	head -c "$stdin_mode" >"$stdin_source"
	[ "$(stat -c %s -- "$stdin_source")" = "$stdin_mode" ] || { rm -rf -- "$process_dir"; echo short; exit 0; };;
esac
# The command runs as a script file, so its text is in no argv either.
printf '%s' "$command_text" >"$process_dir/c"
: >"$process_dir/1"
: >"$process_dir/2"
case $spawn_flags in *e*) : >"$process_dir/m";; esac
# A background job of a non-interactive shell starts with SIGINT and SIGQUIT
# ignored: env --default-signal (coreutils 8.31) gives the command them back.
# `env` is found now, so that a PATH among the env pairs does not matter.
env_program=$(command -v env) || env_program=/usr/bin/env
"$env_program" --default-signal=INT true 2>/dev/null && env_program="$env_program --default-signal=INT,QUIT"
# A relay copies its FIFO into the file up to the cap and then discards the
# rest, so a chatty process never fills the disk nor blocks on a full pipe.
# `stdbuf -o0`: head alone holds its output back in a stdio buffer; an image
# without stdbuf gets an uncapped `cat`.
if stdbuf -o0 true 2>/dev/null; then
	relay_to() { stdbuf -o0 head -c "$relay_limit" >>"$1"; exec cat; }
else
	relay_to() { exec cat >>"$1"; }
fi

# Retention: exited processes go an hour after they exit, those spawned with
# flag `e` a minute after, and the oldest beyond 64 exited ones at once.
(
	cd "$proc_root" && touch -d '1 hour ago' .r && touch -d '1 minute ago' .m && {
		exited_count=0
		for each_exit_file in */x; do [ -f "$each_exit_file" ] && exited_count=$((exited_count+1)); done
		set --
		for each_exit_file in */x; do
			[ -f "$each_exit_file" ] && is_process_id "${each_exit_file%/x}" || continue
			# -ot is not POSIX, but dash, bash and busybox sh have it.
			# shellcheck disable=SC3013
			{ [ "$exited_count" -gt 64 ] || [ "$each_exit_file" -ot .r ] || { [ -e "${each_exit_file%/x}/m" ] && [ "$each_exit_file" -ot .m ]; }; } && set -- "$@" "${each_exit_file%/x}"
			exited_count=$((exited_count-1))
		done
		[ $# -gt 0 ] && rm -rf -- "$@"
	}
) </dev/null >/dev/null 2>&1 &

# The waiter: a detached shell that outlives this exec. fd 3 is the exec's
# stdout, kept only for the `ok` line; fds 7 and 8 hold the FIFOs open for
# writing until the trailers are written.
(
	exec 3>&1 >/dev/null 2>&1 </dev/null
	# The relays close fd 3 before calling their function: dash keeps a saved
	# copy of a descriptor redirected for a function call while the function
	# runs, which would hold the spawn exec open.
	(exec 3>&-; relay_to "$process_dir/1") <"$process_dir/o" &
	relay_out_pid=$!
	(exec 3>&-; relay_to "$process_dir/2") <"$process_dir/e" &
	relay_err_pid=$!
	exec 7>"$process_dir/o" 8>"$process_dir/e"
	# With `stdin: true`, a sleep holds the FIFO `0` open for writing (opened
	# read-write, so no open blocks) until closeStdin ends it.
	stdin_holder=-
	if [ "$stdin_mode" = open ]; then
		exec 9<>"$process_dir/0"
		sleep 2147483647 <&9 3>&- 7>&- 8>&- 9>&- &
		stdin_holder=$!
	fi
	# The command, with the kill marker. Every word of its start is expanded
	# before the first pair is exported: the pairs may name any of this
	# script's (minified, one- or two-letter) variables, and a caller's `J`
	# or `d` must reach the command, not choose what runs. The pairs come
	# before the first `--` (each holds a `=`); env_program is split on
	# purpose.
	# shellcheck disable=SC2086
	set -- "$@" AGENT_SANDBOX_RUN=p$process_id: -- $env_program -- /bin/sh "$process_dir/c"
	(
		until [ "$1" = -- ]; do
			# shellcheck disable=SC2163
			export "$1"
			shift
		done
		shift
		exec "$@"
	) <"$stdin_source" >&7 2>&8 3>&- 7>&- 8>&- 9>&- &
	process_pid=$!
	exec 9>&-
	# The timeout, enforced here so that it holds while nobody is connected:
	# a timer that leaves `t` and terminates the tree; the waiter ends the
	# timer when the command exits first.
	timer_pid=
	[ -n "$timeout_seconds" ] && {
		(
			trap 'kill "$sleep_pid" 2>/dev/null;exit 0' TERM
			sleep "$timeout_seconds" &
			sleep_pid=$!
			wait "$sleep_pid" || exit 0
			# Fired: the command dies of this TERM, and the waiter then sends
			# its own, which must not cut the tree kill short (a child that
			# ignores TERM would outlive the timeout without the KILL).
			trap '' TERM
			: >"$process_dir/t"
			kill_roots=" $process_pid:1"
			kill_markers=" p$process_id:"
			terminate_tree 20 TERM
		) 3>&- 7>&- 8>&- &
		timer_pid=$!
	}
	# The record (process/scripts.rs lists its fields); the waiter's pid and
	# start time come from /proc/self/stat, read by the `read` builtin, so
	# `self` is this shell.
	write_record() {
		set -- ${1##*") "}
		echo "$process_pid $waiter_pid ${20} $relay_out_pid $relay_err_pid $stdin_holder $output_cap $started_ms $command_bytes" >"$process_dir/p"
	}
	read -r stat_line </proc/self/stat
	waiter_pid=${stat_line%% *}
	write_record "$stat_line"
	echo "ok $process_pid" >&3
	exec 3>&-
	wait "$process_pid"
	exit_status=$?
	[ -n "$timer_pid" ] && kill "$timer_pid" 2>/dev/null
	[ "$stdin_holder" != - ] && kill "$stdin_holder" 2>/dev/null
	# `timeout`, `s<n>` for a signal the provider sent (signal.sh leaves `k`),
	# else the exit status.
	if [ -e "$process_dir/t" ]; then
		exit_status=timeout
	elif [ -e "$process_dir/k" ] && [ "$exit_status" -gt 128 ]; then
		exit_status=s$((exit_status-128))
	fi
	echo "$exit_status" >"$process_dir/x"
	printf '\036asb %s %s\n' "$process_id" "$exit_status" >&7
	printf '\036asb %s %s\n' "$process_id" "$exit_status" >&8
) &
exit 0
