# shellcheck shell=sh
# Kills recorded runs (exec/kill.rs: kill_argv, sweep_argv): TERM, up to $2
# tenths of a second of grace, then KILL. Records are looked for in both
# places wrapper.sh may write them.
#
# `$1 = kill`: $3… are run ids; a tombstone `<id>.k` is left for each, so a
# wrapper that has not yet started its command never starts it.
# `$1 = hangup`: the same with HUP instead of TERM (a terminal's close).
# `$1 = signal`: $2 is a signal name sent to the trees of the runs $3…,
# twice (children forked in between), and nothing more: no tombstone, and
# not to the wrappers, which must outlive their commands to report them.
# `$1 = sweep`: $3 is this engine's instance id, $4 its next run number, $5…
# its live run ids; every other record in the pod is removed, and the runs
# still going in them killed, except this engine's runs numbered $4 or higher
# (started after the sweep was planned). Only names of the engine's form
# (`<16 hex>.<digits>`, `.k`) in a directory make_private_dir would accept
# are considered: the sweep removes nothing else, wherever the directory
# points.
#
# A run is still going when the pid in its record is alive, started within
# two seconds of the record's mtime (the wrapper writes it at once; a pid
# reused later fails the check) and is that run's wrapper (its argv names
# the run): a forged record cannot point the kill at another process. A
# finished run's leftover children, started in the background on purpose,
# are not touched by a sweep; a kill of a run whose wrapper died still kills
# by the marker.
#
# needs: lib-proc.sh lib-private-dir.sh lib-kill.sh
# minify: kill_mode=w grace_tenths=g shm_run_dir=D1 tmp_run_dir=D2 swept_records=N boot_time=B
# minify: stat_key=k stat_value=b started_with_record=ok record_mtime=u start_skew=J
# minify: is_wrapper_of=wr command_line=cm add_record=ad record_pid=y is_run_id=ri id_instance=h
# minify: wrapper_too=W dir_number=d run_dir=r run_id=i instance_id=o next_number=n record_path=F live_id=z swept_entry=E

kill_mode=$1
grace_tenths=$2
wrapper_too=1
[ "$kill_mode" = signal ] && wrapper_too=0
shift 2
shm_run_dir=/dev/shm/.agent-sandbox/run
tmp_run_dir=${TMPDIR:-/tmp}/.agent-sandbox/run
kill_roots=
kill_markers=
swept_records=
boot_time=
while read -r stat_key stat_value; do [ "$stat_key" = btime ] && { boot_time=$stat_value; break; }; done </proc/stat
all_digits "$boot_time" || boot_time=0

# Succeeds when process $1 is alive and started within two seconds of the
# mtime of record $2.
started_with_record() {
	read_start_time "$1" || return 1
	all_digits "$start_time" || return 1
	record_mtime=$(stat -c %Y -- "$2" 2>/dev/null) || return 1
	all_digits "$record_mtime" || return 1
	start_skew=$((boot_time+start_time/100-record_mtime))
	[ "$start_skew" -ge -2 ] && [ "$start_skew" -le 2 ]
}

# Succeeds when process $1 is the wrapper of run $2: its argv is
# `/bin/sh -c <wrapper> sh <run id> …`.
is_wrapper_of() {
	command_line=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)
	case $command_line in *" sh $2 "*) return 0;; esac
	return 1
}

# Record $1 of run $2: its wrapper, if still going, becomes a root of the
# kill, and the run's marker is killed with it; with $3 = 1 the marker is
# killed anyway (a run asked for by name whose wrapper died).
add_record() {
	read -r record_pid 2>/dev/null <"$1" || return 0
	all_digits "$record_pid" || return 0
	if started_with_record "$record_pid" "$1" && is_wrapper_of "$record_pid" "$2"; then
		kill_roots="$kill_roots $record_pid:$wrapper_too"
		kill_markers="$kill_markers $2:"
	elif [ "$3" = 1 ]; then
		kill_markers="$kill_markers $2:"
	fi
}

# Succeeds for a name of the engine's form, `<16 hex>.<digits>`.
is_run_id() {
	id_instance=${1%%.*}
	case $id_instance in *[!0-9a-f]*) return 1;; esac
	[ ${#id_instance} -eq 16 ] && all_digits "${1#*.}"
}

for dir_number in 1 2; do
	[ $dir_number = 1 ] && run_dir=$shm_run_dir || run_dir=$tmp_run_dir
	if [ "$kill_mode" != sweep ]; then
		make_private_dir "$run_dir" || continue
		for run_id; do
			[ "$kill_mode" = signal ] || : 2>/dev/null >"$run_dir/$run_id.k"
			add_record "$run_dir/$run_id" "$run_id" 1
		done
	else
		[ -d "$run_dir" ] && [ ! -L "$run_dir" ] && [ -O "$run_dir" ] && [ ! -L "${run_dir%/*}" ] || continue
		instance_id=$1
		next_number=$2
		shift 2
		for record_path in "$run_dir"/*; do
			run_id=${record_path##*/}
			run_id=${run_id%.k}
			is_run_id "$run_id" || continue
			case $run_id in "$instance_id".*) [ "${run_id#"$instance_id".}" -ge "$next_number" ] && continue;; esac
			for live_id; do [ "$live_id" = "$run_id" ] && continue 2; done
			# A record and its tombstone are one run.
			case " $swept_records " in *" $dir_number:$run_id "*) continue;; esac
			swept_records="$swept_records $dir_number:$run_id"
			add_record "$run_dir/$run_id" "$run_id" 0
		done
		set -- "$instance_id" "$next_number" "$@"
	fi
done
if [ -n "$kill_markers" ]; then
	case $kill_mode in
		signal) signal_tree "$grace_tenths";;
		hangup) terminate_tree "$grace_tenths" HUP;;
		*) terminate_tree "$grace_tenths" TERM;;
	esac
fi
for swept_entry in $swept_records; do
	[ "${swept_entry%%:*}" = 1 ] && run_dir=$shm_run_dir || run_dir=$tmp_run_dir
	rm -f -- "$run_dir/${swept_entry#*:}" "$run_dir/${swept_entry#*:}.k"
done
exit 0
