# shellcheck shell=sh
# The wrapper around every user command (exec/wrapper.rs says what the
# arguments and stdin hold, and why command, cwd and env are not arguments).
#
# Ends with one trailer line on stdout and on stderr:
# `\036asb <secret> <status>`, where status is the command's exit status, or
# `short` (the request arrived incomplete), `rundir` (no run record could be
# written) or `cwd` (no such directory) for a command that was never started.
#
# needs: lib-fields.sh lib-private-dir.sh
# minify: run_id=i stdin_bytes=n cleanup_below=k long_command_bytes=L env_count=j
# minify: run_secret=s send_trailer=t work_dir=w command_text=c
# minify: each_path=x remove_old_records=q bound_below=b instance_id=p record_number=y
# minify: run_dir=r record_file=d command_prelude=P exit_status=e
# minify: terminal_size=z terminal_mode=m

run_id=$1
stdin_bytes=$2
cleanup_below=$3
long_command_bytes=$4
env_count=$5
terminal_size=$6

# On a terminal the line discipline echoes input and acts on its control
# bytes as they arrive: the secret and the fields must arrive raw and
# unechoed. The engine sends them once it reads this line.
if [ -n "$terminal_size" ]; then
	terminal_mode=$(stty -g 2>/dev/null) && stty raw -echo -iexten || exit 1
	printf '\036asb ready\n'
fi

# The run's secret, first on stdin: only the trailers carry it, so a command
# that prints a trailer of its own (it can see its run id) makes output, not
# the end of the exec.
IFS= read -r run_secret || exit 1
case $run_secret in ''|*[!0-9a-f]*) exit 1;; esac

# One write per stream, so that a child writing at the same moment cannot
# split the line.
send_trailer() {
	printf '\036asb %s %s\n' "$run_secret" "$1"
	printf '\036asb %s %s\n' "$run_secret" "$1" >&2
}

read_field || { send_trailer short; exit 0; }
work_dir=$field_value
read_field || { send_trailer short; exit 0; }
command_text=$field_value
# The NAME=VALUE pairs become the positional parameters, exported just
# before the command runs.
set --
while [ "$env_count" -gt 0 ]; do
	read_field || { send_trailer short; exit 0; }
	set -- "$@" "$field_value"
	env_count=$((env_count-1))
done

# Removes, in the background, the records of this engine's runs numbered
# below $1 (all finished): the engine asks for it every few hundred runs so
# that records do not pile up. Records are `<instance>.<number>` and, for a
# killed run, `<instance>.<number>.k`.
remove_old_records() {
	bound_below=$1
	instance_id=${run_id%.*}
	set --
	for each_path in "$run_dir/$instance_id".*; do
		record_number=${each_path##*/}
		record_number=${record_number#"$instance_id".}
		record_number=${record_number%.k}
		case $record_number in ''|*[!0-9]*) continue;; esac
		[ "$record_number" -lt "$bound_below" ] && set -- "$@" "$each_path"
	done
	# </dev/null: the background job must not hold the exec's stdin.
	# shellcheck disable=SC2217
	[ $# -gt 0 ] && rm -f -- "$@" </dev/null >/dev/null 2>&1 &
}

# The run record: the wrapper's pid, the root of the tree a kill walks
# (kill.sh). /dev/shm is a tmpfs in every container runtime (a write there
# costs tens of microseconds, on the container's disk a few hundred). A
# sandbox that points these directories elsewhere gets the other place, or
# `rundir`, never records written into its workspace (make_private_dir).
run_dir=/dev/shm/.agent-sandbox/run
{ make_private_dir "$run_dir" || { run_dir=${TMPDIR:-/tmp}/.agent-sandbox/run; make_private_dir "$run_dir"; }; } 2>/dev/null || { send_trailer rundir; exit 0; }
record_file=$run_dir/$run_id
{ echo $$ >"$record_file"; } 2>/dev/null || { send_trailer rundir; exit 0; }

# A long command follows the fields, then the run id: a command cut short by
# a dropped connection lacks the id and is never run.
[ -n "$long_command_bytes" ] && {
	command_text=$(head -c "$long_command_bytes")
	case $command_text in *"$run_id") command_text=${command_text%"$run_id"};; *) send_trailer short; exit 0;; esac
}
if [ -n "$work_dir" ]; then CDPATH='' cd -- "$work_dir" 2>/dev/null || { send_trailer cwd; exit 0; }; fi
[ -n "$cleanup_below" ] && remove_old_records "$cleanup_below"
# A kill drops its tombstone `<run id>.k` before it reads the record; we look
# for the tombstone after the record exists. One of the two sees the other,
# so a kill that races the start of the command still stops it.
[ -e "$record_file.k" ] && { send_trailer 137; exit 137; }
# The kill marker: every process of the run inherits it, so a kill finds
# them after their parent died.
export AGENT_SANDBOX_RUN=$run_id:

# The command runs in a subshell (a fork: `$$` stays the wrapper's pid, and
# `exit`, traps, `exec` and redirections behave as in `sh -c`), evaluated
# behind a prelude that first forgets the wrapper's variables, the secret
# among them, and functions, and then exports the env pairs: the minified
# names are one or two letters, and a caller's `P` or `n` must be what the
# command sees, not a wrapper variable nor a name unset after it was set.
# After the export nothing of the wrapper's is read (and a user PATH no
# longer matters: only builtins follow). The only difference from `sh -c`
# the command can see: dash prefixes errors of evaluated code with `eval: `.
command_prelude='unset -v bound_below command_text record_file run_id env_count cleanup_below stdin_bytes instance_id run_dir run_secret field_value work_dir each_path dir_path record_number field_line field_lines long_command_bytes newline_char command_prelude terminal_size terminal_mode;unset -f read_field send_trailer make_private_dir remove_old_records;[ $# -eq 0 ]||export "$@";set --;'
if [ -n "$terminal_size" ]; then
	# The terminal's own mode back, and its size (the node may apply the
	# resize message after the command's first read); then the engine hands
	# on everything after the next line. Ctrl-C and Ctrl-\ signal the whole
	# foreground process group, this shell included unless a job-control
	# shell runs the command: caught here, so it outlives the command to
	# report its status; the subshell resets them for the command.
	stty "$terminal_mode" cols "${terminal_size% *}" rows "${terminal_size#* }"
	trap : INT QUIT
	printf '\036asb started %s\n' "$$"
fi
if [ "$stdin_bytes" = - ]; then
	# The command reads the exec's stdin itself: a terminal, or a stream up
	# to an end it recognizes (the transfer scripts' framing), which gets no
	# EOF and leaves nothing unread.
	(eval "$command_prelude$command_text")
elif [ -n "$stdin_bytes" ]; then
	# `head -c` gives the command EOF after exactly the bytes sent (a v4
	# server cannot close stdin); the `cat` drains what the command left
	# unread, also after its `exit`: else the server closes the socket with
	# bytes pending, the kernel answers with a reset, and the trailers are
	# lost.
	head -c "$stdin_bytes" | (trap 'command -p cat >/dev/null' EXIT; eval "$command_prelude$command_text")
else
	(exec </dev/null; eval "$command_prelude$command_text")
fi
exit_status=$?
send_trailer "$exit_status"
exit "$exit_status"
