# shellcheck shell=sh
# Helpers for what scripts read from /proc and from the provider's own
# files, all of which the sandbox can forge: every value is checked before it
# is used, never trusted.
#
# minify: all_digits=nu each_value=V read_start_time=st stat_line=l start_time=S

# Succeeds when every argument is a non-empty string of digits: a forged
# record can then name no path like `../x` and reach no arithmetic (which
# bash evaluates as code).
all_digits() {
	for each_value; do
		case $each_value in ''|*[!0-9]*) return 1;; esac
	done
}

# Succeeds when process $1 is alive (not a zombie) and sets start_time to its
# start time (clock ticks since boot, the 22nd field of /proc/<pid>/stat): a
# pid and its start time name one process, even after the pid is reused.
read_start_time() {
	case $1 in ''|*[!0-9]*) return 1;; esac
	read -r stat_line 2>/dev/null <"/proc/$1/stat" || return 1
	# The fields after the command name, which may itself hold `) `.
	set -- ${stat_line##*") "}
	case $1 in Z|X) return 1;; esac
	# For the caller (some only ask whether the process is alive).
	# shellcheck disable=SC2034
	start_time=${20}
}
