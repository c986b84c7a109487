//! The scripts behind spawned processes. Everything about a process lives in
//! `${TMPDIR:-/tmp}/.agent-sandbox/proc/<id>/`:
//!
//! | file | what |
//! |---|---|
//! | `p` | `<pid> <waiter pid> <waiter start time> <relay pid> <relay pid> <stdin holder pid or -> <cap> <started ms> <command bytes>` |
//! | `c` | the command text |
//! | `o`, `e` | FIFOs: the command's stdout and stderr, read by the relays |
//! | `1`, `2` | stdout and stderr as written, then the trailer; at most cap + [`MAX_TRAILER`] bytes |
//! | `i` / `0` | stdin bytes given at spawn / a FIFO kept open for `writeStdin` |
//! | `0.c` | stdin was closed |
//! | `t` | the timeout fired |
//! | `x` | the exit status (or `timeout`), written by the waiter |
//!
//! The waiter is a detached shell that starts the command with
//! `AGENT_SANDBOX_RUN=p<id>:` in its environment (the kill marker), waits for
//! it, writes `x` and then the trailer (see [`crate::exec::trailer`]) into both
//! FIFOs. A relay per stream copies its FIFO into the file up to the cap and
//! then discards the rest, so a chatty process never fills the disk nor
//! blocks on a full pipe (`stdbuf -o0 head -c`: head alone holds its output
//! back in a stdio buffer; an image without `stdbuf` gets an uncapped `cat`).
//! (The relays close the exec's stdout with `exec` before calling their
//! function: dash keeps a saved copy of a descriptor redirected for a function
//! call while the function runs, which would hold the spawn call open.) Readers resume from byte offsets (see
//! [`super::stream`]), so any number of them, from any host, see the same
//! bytes. Exited processes are removed an hour after they exit, or sooner
//! when more than 64 exited ones are kept.
//!
//! Arguments travel as `$1…` (see [`crate::exec::wrapper`]); ids and numbers
//! are checked by the caller. All need `mkfifo`, `head`, `cat`, `tail` (GNU:
//! `-f --pid`), `stat`, `stdbuf`, `touch`, `rm`, `env`, `sleep` from the image.

use crate::exec::kill::kill_lib;
#[cfg(doc)]
use crate::exec::trailer::MAX_TRAILER;
use crate::exec::wrapper::field_lib;

/// Lines shared by the scripts that read a process's state: `$d` its
/// directory from `$1`; `hd` prints the state line
/// `<x or -> <waiter alive 0|1> <cap>`. The record and `x` are the
/// sandbox's to rewrite: every value is checked (digits, the cap at most
/// [`MAX_CAP`](super::stream::MAX_CAP)) before it is used, and a record that
/// fails is `gone`.
macro_rules! proc_lib {
    () => {
        r#"b=${TMPDIR:-/tmp}/.agent-sandbox/proc;d=$b/$1
hd(){ x=-;[ -f "$d/x" ]&&{ read -r x <"$d/x"||x=-;};case $x in timeout|s[1-9]|s[1-9][0-9]) ;; *) nu "$x"||x=-;;esac;W=0;st "$w"&&[ "$S" = "$ws" ]&&W=1;echo "$x $W $cap";}
[ -d "$d" ]&&[ ! -L "$d" ]&&[ ! -L "$b" ]&&[ -O "$b" ]||{ echo gone;exit 0;}
read -r p w ws r1 r2 h cap at n <"$d/p"||{ echo gone;exit 0;}
nu "$p" "$w" "$ws" "$cap"||{ echo gone;exit 0;}
[ "$h" = - ]||nu "$h"||h=-
[ "$cap" -le 67108864 ]||cap=67108864
"#
    };
}

/// Starts a process. `$1` id, `$2` stdin (empty: none, `open`: a FIFO for
/// `writeStdin`, else the number of stdin bytes sent now), `$3` timeout in
/// seconds (empty: none), `$4` cap per stream, `$5` start time (ms), `$6`
/// command length (bytes), `$7` flags: `e` for a process removed a minute
/// after it exits, `c` for a long command sent after the fields (then the
/// id), `$8` number of env pairs. Stdin: the fields cwd (empty: the exec's
/// directory), command (empty when long) and the `NAME=VALUE` pairs (see
/// [`crate::exec::wrapper::WRAPPER`], which carries them the same way and
/// says why they are not arguments), a long command, then the stdin bytes.
/// Prints `ok <pid>` once the command runs, or `cwd`, `rundir`, `short`
/// (stdin incomplete) having started nothing. Also removes, in the
/// background, exited processes past their retention.
///
/// The command runs as `/bin/sh <dir>/c`, a script file in the process's
/// private directory, so its text is not in any argv either, and the env
/// pairs are exported by the waiter's subshell just before it `exec`s
/// (`env` found first, so a `PATH` among them does not matter).
pub const SPAWN: &str = concat!(
    kill_lib!(),
    field_lib!(),
    r#"i=$1;b=${TMPDIR:-/tmp}/.agent-sandbox/proc;d=$b/$i;m=$2;o=$3;cap=$4;L=$(($4+64));at=$5;n=$6;F=$7;j=$8
pi(){ case $1 in *[!0-9a-f]*) return 1;;esac;[ ${#1} -eq 20 ];}
g||{ echo short;exit 0;};w=$v
g||{ echo short;exit 0;};c=$v
set --;while [ "$j" -gt 0 ];do g||{ echo short;exit 0;};set -- "$@" "$v";j=$((j-1));done
case $F in *c*) c=$(head -c $((n+20)));case $c in *"$i") c=${c%"$i"};; *) echo short;exit 0;;esac;;esac
if [ -n "$w" ];then CDPATH='' cd -- "$w" 2>/dev/null||{ echo cwd;exit 0;};fi
od "$b" 2>/dev/null&&mkdir -m 700 "$d" 2>/dev/null||{ echo rundir;exit 0;}
if [ "$m" = open ];then mkfifo "$d/o" "$d/e" "$d/0";else mkfifo "$d/o" "$d/e";fi 2>/dev/null||{ rm -rf -- "$d";echo rundir;exit 0;}
I=/dev/null
case $m in '') ;; open) I=$d/0;; *) I=$d/i;head -c "$m" >"$I";[ "$(stat -c %s -- "$I")" = "$m" ]||{ rm -rf -- "$d";echo short;exit 0;};;esac
printf '%s' "$c" >"$d/c";: >"$d/1";: >"$d/2";case $F in *e*) : >"$d/m";;esac
v=$(command -v env)||v=/usr/bin/env;"$v" --default-signal=INT true 2>/dev/null&&v="$v --default-signal=INT,QUIT"
if stdbuf -o0 true 2>/dev/null;then y(){ stdbuf -o0 head -c "$L" >>"$1";exec cat;};else y(){ exec cat >>"$1";};fi
(cd "$b"&&touch -d '1 hour ago' .r&&touch -d '1 minute ago' .m&&{ N=0;for x in */x;do [ -f "$x" ]&&N=$((N+1));done;set --
for x in */x;do [ -f "$x" ]&&pi "${x%/x}"||continue;{ [ "$N" -gt 64 ]||[ "$x" -ot .r ]||{ [ -e "${x%/x}/m" ]&&[ "$x" -ot .m ];};}&&set -- "$@" "${x%/x}";N=$((N-1));done
[ $# -gt 0 ]&&rm -rf -- "$@";}) </dev/null >/dev/null 2>&1 &
(exec 3>&1 >/dev/null 2>&1 </dev/null
(exec 3>&-;y "$d/1") <"$d/o" &
r1=$!
(exec 3>&-;y "$d/2") <"$d/e" &
r2=$!
exec 7>"$d/o" 8>"$d/e"
h=-;if [ "$m" = open ];then exec 9<>"$d/0";sleep 2147483647 <&9 3>&- 7>&- 8>&- 9>&- & h=$!;fi
(export "$@" AGENT_SANDBOX_RUN=p$i:;exec $v -- /bin/sh "$d/c") <"$I" >&7 2>&8 3>&- 7>&- 8>&- 9>&- &
p=$!
exec 9>&-
k=;[ -n "$o" ]&&{ (trap 'kill "$s" 2>/dev/null;exit 0' TERM;sleep "$o" & s=$!;wait "$s"||exit 0;: >"$d/t";R=" $p:1";M=" p$i:";kt 20) 3>&- 7>&- 8>&- & k=$!;}
wr(){ set -- ${1##*") "};echo "$p $W ${20} $r1 $r2 $h $cap $at $n" >"$d/p";}
read -r l </proc/self/stat;W=${l%% *};wr "$l"
echo "ok $p" >&3;exec 3>&-
wait "$p";s=$?
[ -n "$k" ]&&kill "$k" 2>/dev/null
[ "$h" != - ]&&kill "$h" 2>/dev/null
if [ -e "$d/t" ];then s=timeout;elif [ -e "$d/k" ]&&[ "$s" -gt 128 ];then s=s$((s-128));fi
echo "$s" >"$d/x"
printf '\036asb %s %s\n' "$i" "$s" >&7
printf '\036asb %s %s\n' "$i" "$s" >&8) &
exit 0"#
);

/// Reads a process's output. `$1` id, `$2` stdout offset, `$3` stderr
/// offset, `$4` `poll` (what is there now, at most `$5` bytes of each
/// stream) or `follow` (and then everything written until the waiter
/// exits). Prints the state line (see the module), then the bytes of `1`
/// from `$2` on stdout and of `2` from `$3` on stderr; `gone` when the
/// process is unknown.
pub const READ: &str = concat!(
    kill_lib!(),
    proc_lib!(),
    r#"hd
if [ "$4" = follow ]&&[ "$W" = 1 ];then tail -c +$(($2+1)) -f -s 0.2 --pid="$w" "$d/1" 2>/dev/null &
tail -c +$(($3+1)) -f -s 0.2 --pid="$w" "$d/2" 3>&2 2>/dev/null >&3 &
wait
else tail -c +$(($2+1)) "$d/1" 2>/dev/null|head -c "$5";tail -c +$(($3+1)) "$d/2" 2>/dev/null|head -c "$5" >&2;fi"#
);

/// Waits until a process's waiter is gone, then prints the state line.
/// `$1` id.
pub const WAIT: &str = concat!(
    kill_lib!(),
    proc_lib!(),
    r#"st "$w"&&[ "$S" = "$ws" ]&&tail -f -s 0.2 --pid="$w" /dev/null 2>/dev/null
hd"#
);

/// Exit codes of [`STDIN`] besides 0 and the [`READ`] `gone` line.
pub mod stdin_codes {
    /// The process was spawned without `stdin: true`.
    pub const NOT_OPEN: i32 = 96;
    /// `closeStdin` was called.
    pub const CLOSED: i32 = 97;
    /// The process has exited.
    pub const EXITED: i32 = 98;
}

/// `$1` id, `$2` `write` (`$3` bytes follow on stdin) or `close`. Writes
/// into the stdin FIFO (opened read-write, so it never blocks on open), or
/// closes stdin by ending the process that holds the FIFO open.
pub const STDIN: &str = concat!(
    kill_lib!(),
    proc_lib!(),
    r#"[ "$h" = - ]&&exit 96
[ -e "$d/0.c" ]&&exit 97
[ -f "$d/x" ]&&exit 98
if [ "$2" = close ];then : >"$d/0.c";kill "$h" 2>/dev/null;exit 0;fi
exec 4<>"$d/0";head -c "$3" >&4"#
);

/// `$1` id, `$2` signal name: sends it (twice, to catch children forked in
/// between) to every process carrying the process's marker and to their
/// descendants: the whole tree, grandchildren whose parent died included.
/// `$2 = terminate`: TERM, 2 s of grace, KILL. Except for STOP and CONT it
/// first leaves `k`, so the waiter records a death by signal as the
/// provider's doing (`s<n>` in `x`).
pub const SIGNAL: &str = concat!(
    kill_lib!(),
    proc_lib!(),
    r#"R=;st "$p"&&R=" $p:1";M=" p$1:"
case $2 in STOP|CONT) ;; *) : >"$d/k";;esac
if [ "$2" = terminate ];then kt 20;else K=;kc;ks "$2";kc;ks "$2";fi
exit 0"#
);

/// Lists processes. `$1` an id to list only that one (empty: all), `$2`
/// most entries, `$3` most bytes of each command. Prints per process a line
/// `<id> <pid> <started ms> <x or -> <waiter alive 0|1>`, then the head of
/// its command text and a NUL (commands cannot hold NUL bytes); `more` after
/// `$2` entries; a line `.` at the end. Linear in the number of processes
/// (one `head` each), whatever the sandbox left in the directory.
pub const LIST: &str = concat!(
    kill_lib!(),
    r#"b=${TMPDIR:-/tmp}/.agent-sandbox/proc
[ ! -L "$b" ]&&[ -O "$b" ]&&cd "$b" 2>/dev/null||{ echo .;exit 0;}
g=*;[ -n "$1" ]&&g=$1
N=$2
for f in $g/p;do [ -f "$f" ]||continue;i=${f%/p}
case $i in *[!0-9a-f]*) continue;;esac;[ ${#i} -eq 20 ]||continue
read -r p w ws r1 r2 h cap at n <"$f"||continue;nu "$p" "$w" "$ws" "$at"||continue
[ "$N" -gt 0 ]||{ echo more;exit 0;};N=$((N-1))
x=-;[ -f "$i/x" ]&&{ read -r x <"$i/x"||x=-;};case $x in timeout|s[1-9]|s[1-9][0-9]) ;; *) nu "$x"||x=-;;esac
W=0;st "$w"&&[ "$S" = "$ws" ]&&W=1
echo "$i $p $at $x $W";head -c "$3" -- "$i/c" 2>/dev/null;printf '\0';done
echo ."#
);
