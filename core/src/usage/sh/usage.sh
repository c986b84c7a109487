# shellcheck shell=sh
# Reads what the container uses (usage/mod.rs: USAGE) from its cgroup files,
# never /proc/meminfo or /proc/stat (they describe the node). $1 the
# directory whose filesystem is reported (the sandbox's cwd), $2 seconds
# between two CPU readings (empty: one reading).
#
# Prints `cgroup2` or `cgroup1`, then readings: each starts with a line
# `@@<ns since the epoch>` and holds, per file, `@<path>` and the file's
# content, or `!<path>` when it cannot be read. With $2, a first reading holds
# only the CPU usage file. The last one ends with `@disk` and `stat -f`'s
# `<fundamental block size> <blocks> <free blocks>` of $1 (`!disk` when it
# fails). Nothing here interprets a number: usage/parse.rs does. Exit 97 with
# a tool's name when the image lacks it.
#
# minify: cgroup_root=R cgroup_dir=D cpu_file=C cgroup_files=L section_name=K section_out=V sample_wait=W disk_dir=P cgroup_file=F file_line=Z

sample_wait=$2
for tool in date stat ${sample_wait:+sleep}; do
	command -v "$tool" >/dev/null 2>&1 || { echo "$tool"; exit 97; }
done

# `@name` and what the command prints, or `!name` if it fails.
section() {
	section_name=$1
	shift
	if section_out=$("$@" 2>/dev/null); then
		printf '@%s\n%s\n' "$section_name" "$section_out"
	else
		echo "!$section_name"
	fi
}

# `@path` and the file's lines, or `!path` if it cannot be read: with the
# shell's own `read`, as a `cat` per file was a process start each, most of
# the call's time.
file_section() {
	if [ -r "$1" ]; then
		printf '@%s\n' "$1"
		while IFS= read -r file_line || [ -n "$file_line" ]; do
			printf '%s\n' "$file_line"
		done <"$1"
	else
		echo "!$1"
	fi
}

reading() {
	printf @@
	date +%s%N
	for cgroup_file do
		file_section "$cgroup_file"
	done
}

cgroup_root=/sys/fs/cgroup
if [ -e $cgroup_root/cgroup.controllers ]; then
	echo cgroup2
	# With a cgroup namespace (what runtimes give a container)
	# /proc/self/cgroup says `0::/` and the container's files are at the root;
	# without one it names the container's cgroup below the root.
	cgroup_dir=$cgroup_root
	while IFS= read -r line; do
		case $line in 0::/?*) [ -r "$cgroup_root${line#0::}/memory.current" ] && cgroup_dir=$cgroup_root${line#0::};; esac
	done </proc/self/cgroup
	cpu_file=$cgroup_dir/cpu.stat
	cgroup_files="cpu.max memory.current memory.max memory.stat memory.events pids.current pids.max"
else
	# One directory per controller; a co-mounted `cpu,cpuacct` comes with
	# `cpu` and `cpuacct` links to it (runc makes them).
	echo cgroup1
	cgroup_dir=$cgroup_root
	cpu_file=$cgroup_dir/cpuacct/cpuacct.usage
	cgroup_files="cpu/cpu.cfs_quota_us cpu/cpu.cfs_period_us memory/memory.usage_in_bytes memory/memory.limit_in_bytes memory/memory.stat memory/memory.oom_control pids/pids.current pids/pids.max"
fi
if [ -n "$sample_wait" ]; then
	reading "$cpu_file"
	sleep "$sample_wait"
fi
disk_dir=$1
set --
for cgroup_file in $cgroup_files; do
	set -- "$@" "$cgroup_dir/$cgroup_file"
done
reading "$cpu_file" "$@"
section disk stat -f -c '%S %b %f' -- "$disk_dir"
