# shellcheck shell=sh
# Killing a process tree found in /proc (exec/kill.rs says why there is no
# process group to signal instead).
#
# Inputs: kill_roots, ` <pid>:<0|1> …` (`1`: the root itself too, `0`: only
# its descendants), and kill_markers, ` <mark> …`: every process whose
# environment holds AGENT_SANDBOX_RUN=<mark> belongs to the tree, with its
# descendants (children whose parent died were re-parented to the pod's init
# and are found by the marker they inherited). Never pid 1 or the script
# itself. Roots come first in kill_pids, so they are signalled first.
#
# Without `local` in POSIX sh these functions set every variable named in the
# `# minify:` lines below (and lib-proc.sh's): a script that includes them
# keeps its own state in other names.
#
# needs: lib-proc.sh
# minify: kill_roots=R kill_markers=M kill_pids=K parent_pairs=T tree_pids=P
# minify: add_kill_pid=ka add_parent_pair=kp collect_kill_pids=kc signal_kill_pids=ks terminate_tree=kt signal_tree=kg
# minify: each_pid=q stat_path=Q each_entry=x environ_text=O environ_line=U each_marker=A tree_grew=t
# minify: grace_waited=H some_survived=a

# Adds pid $1 to kill_pids, once, unless it is 1 or this script.
add_kill_pid() {
	case " $kill_pids " in *" $1 "*) ;; *) [ "$1" = 1 ] || [ "$1" = "$$" ] || kill_pids="$kill_pids $1";; esac
}

# Called with the fields of /proc/<each_pid>/stat after the command name:
# $2 is the parent pid.
add_parent_pair() {
	parent_pairs="$parent_pairs $each_pid:$2"
}

# Adds to kill_pids the roots, the processes with a marker, and every
# descendant of either.
collect_kill_pids() {
	for each_entry in $kill_roots; do
		case $each_entry in *:1) add_kill_pid "${each_entry%:*}";; esac
	done
	# One pass over /proc: each process's parent, and its marker.
	parent_pairs=
	for stat_path in /proc/[0-9]*/stat; do
		read -r stat_line 2>/dev/null <"$stat_path" || continue
		each_pid=${stat_line%% *}
		add_parent_pair ${stat_line##*") "}
		[ -n "$kill_markers" ] || continue
		# environ is NUL-separated: `read` drops the NULs, so the variables
		# run together, and `<mark>` ends with `:` so that run 1 is not run 12.
		environ_text=
		{ while IFS= read -r environ_line || [ -n "$environ_line" ]; do environ_text=$environ_text$environ_line; done <"/proc/$each_pid/environ"; } 2>/dev/null
		for each_marker in $kill_markers; do
			case $environ_text in *"AGENT_SANDBOX_RUN=$each_marker"*) add_kill_pid "$each_pid";; esac
		done
	done
	# Descendants: add children of the tree until no process is added.
	tree_pids=$kill_pids
	for each_entry in $kill_roots; do tree_pids="$tree_pids ${each_entry%:*}"; done
	tree_grew=1
	while [ -n "$tree_grew" ]; do
		tree_grew=
		# each_entry is <pid>:<parent pid>: a child of the tree joins it.
		for each_entry in $parent_pairs; do
			case " $tree_pids " in *" ${each_entry#*:} "*)
				case " $tree_pids " in *" ${each_entry%:*} "*) ;; *) tree_pids="$tree_pids ${each_entry%:*}"; add_kill_pid "${each_entry%:*}"; tree_grew=1;; esac;;
			esac
		done
	done
}

# Sends signal $1 to kill_pids.
signal_kill_pids() {
	for each_pid in $kill_pids; do kill -"$1" "$each_pid"; done 2>/dev/null
}

# Sends signal $1 to the tree, twice: the second pass catches children
# forked during the first.
signal_tree() {
	kill_pids=
	collect_kill_pids
	signal_kill_pids "$1"
	collect_kill_pids
	signal_kill_pids "$1"
}

# Terminates the tree: STOP (twice: the second pass catches children forked
# during the first), $2 (TERM, or HUP for a terminal's hangup), CONT. All of it is stopped before the TERM so that
# no shell in it sees a child die and prints "Terminated" before its own TERM
# lands. Then up to $1 tenths of a second of grace for them to go (zombies
# count as gone), then KILL to every process found and any new descendant.
# When some outlived the grace they are all stopped again first, because KILL
# goes to one process after another: a running shell whose child was killed
# before it would go on to its next command in between.
terminate_tree() {
	kill_pids=
	collect_kill_pids
	signal_kill_pids STOP
	collect_kill_pids
	signal_kill_pids STOP
	signal_kill_pids "$2"
	signal_kill_pids CONT
	grace_waited=0
	while [ "$grace_waited" -lt "$1" ]; do
		some_survived=
		for each_pid in $kill_pids; do read_start_time "$each_pid" && { some_survived=1; break; }; done
		[ -z "$some_survived" ] && break
		sleep 0.1 2>/dev/null || sleep 1
		grace_waited=$((grace_waited+1))
	done
	collect_kill_pids
	[ -n "$some_survived" ] && { signal_kill_pids STOP; collect_kill_pids; signal_kill_pids STOP; }
	signal_kill_pids KILL
}
