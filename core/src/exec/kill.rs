//! Killing a command's whole process tree, and the orphan sweep.
//!
//! There is no process group to signal: the wrapper runs commands without
//! `setsid` (a process start per exec; see [`super::wrapper`]). Instead a
//! kill finds a command's processes in `/proc`: the wrapper (the command's
//! own shell, signalled first so it reports no killed job), its descendants
//! (by parent pid), plus every process whose environment carries the
//! run's marker `AGENT_SANDBOX_RUN=<id>:` (children whose parent died and
//! were re-parented to the pod's init), plus their descendants. It stops
//! them (twice: the second pass catches children forked during the first),
//! sends TERM, continues them, waits up to the grace period for them to go
//! (zombies count as gone), then sends KILL to every process it found and any
//! new descendant. When some outlived the grace, they are all stopped again
//! before the KILL, because KILL goes to one process after another: a
//! running shell whose child was killed before it would go on to its next
//! command in between. A process that both
//! leaves the tree and clears its environment escapes.

use super::wrapper::script_argv;

/// Shell functions for finding and signalling a command's processes.
///
/// Inputs: `R` = ` <pid>:<0|1> …` roots (`1`: the root itself too), `M` =
/// ` <mark> …` marker values. `kc` adds the matching pids to `K`; `ks SIG`
/// signals `K`; `kt TENTHS` terminates: STOP, TERM, CONT (all of the tree
/// stopped first, so no shell in it sees a child die and prints
/// "Terminated" before its own TERM lands), grace, KILL (STOP first if any
/// survived); `st PID` succeeds for a live process and sets `S` to its start
/// time. Never pid 1 or the script itself. Roots come first in `K`, so they
/// are signalled first.
///
/// Everything read from the sandbox's files is data to check, never trusted:
/// `nu V…` succeeds only for non-empty strings of digits (so a forged record
/// can name no path like `../x` and reach no arithmetic, which bash would
/// evaluate as code); `st` takes only digits. `od DIR` makes `DIR` and its
/// parent private directories (mode 700) if missing and succeeds only when
/// both are real directories of the running user, not symlinks: a sandbox
/// that points the provider's directory at its workspace gets no record
/// written, read or removed there. Without `local` in POSIX sh, the
/// functions use (and clobber) `K S T P c e j l m q s v x a`: the scripts
/// keep their own state in other names.
macro_rules! kill_lib {
    () => {
        r#"st(){ case $1 in ''|*[!0-9]*) return 1;;esac;read -r l 2>/dev/null <"/proc/$1/stat"||return 1;set -- ${l##*") "};case $1 in Z|X) return 1;;esac;S=${20};}
nu(){ for v;do case $v in ''|*[!0-9]*) return 1;;esac;done;}
od(){ for x in "${1%/*}" "$1";do { [ -d "$x" ]&&[ ! -L "$x" ];}||mkdir -m 700 "$x" 2>/dev/null||return 1;[ ! -L "$x" ]&&[ -O "$x" ]||return 1;done;}
ka(){ case " $K " in *" $1 "*) ;; *) [ "$1" = 1 ]||[ "$1" = "$$" ]||K="$K $1";;esac;}
kp(){ T="$T $q:$2";}
kc(){ for x in $R;do case $x in *:1) ka "${x%:*}";;esac;done
T=;for s in /proc/[0-9]*/stat;do read -r l 2>/dev/null <"$s"||continue;q=${l%% *};kp ${l##*") "}
[ -n "$M" ]||continue;v=;{ while IFS= read -r e||[ -n "$e" ];do v=$v$e;done <"/proc/$q/environ";} 2>/dev/null
for m in $M;do case $v in *"AGENT_SANDBOX_RUN=$m"*) ka "$q";;esac;done;done
P=$K;for x in $R;do P="$P ${x%:*}";done
c=1;while [ -n "$c" ];do c=;for x in $T;do case " $P " in *" ${x#*:} "*) case " $P " in *" ${x%:*} "*) ;; *) P="$P ${x%:*}";ka "${x%:*}";c=1;;esac;;esac;done;done;}
ks(){ for q in $K;do kill -"$1" "$q";done 2>/dev/null;}
kt(){ K=;kc;ks STOP;kc;ks STOP;ks TERM;ks CONT;j=0
while [ "$j" -lt "$1" ];do a=;for q in $K;do st "$q"&&{ a=1;break;};done;[ -z "$a" ]&&break;sleep 0.1 2>/dev/null||sleep 1;j=$((j+1));done
kc;[ -n "$a" ]&&{ ks STOP;kc;ks STOP;};ks KILL;}
"#
    };
}
pub(crate) use kill_lib;

/// Kills recorded runs: TERM, up to `$2` tenths of a second of grace, then
/// KILL. Records are looked for in both places the wrapper may write them.
///
/// `$1 = kill`: `$3…` are run ids; a tombstone is left for each (see
/// [`super::wrapper`]). `$1 = sweep`: `$3` is this engine's instance id, `$4`
/// its next run counter, `$5…` its live run ids; every other record in the
/// pod is removed, and the runs still going in them killed, except this
/// engine's runs numbered `$4` or higher (started after the sweep was
/// planned). Only names of the engine's form (`<16 hex>.<digits>`, `.k`)
/// in a directory `od` accepts are considered: the sweep never removes
/// anything else, wherever the directory points.
///
/// A run is still going when the pid in its record is alive, started
/// within two seconds of the record's mtime (the wrapper writes it at once;
/// a pid reused later fails the check) and is that run's wrapper (its argv
/// names the run): a forged record cannot point the kill at another
/// process. A finished run's leftover children,
/// started in the background on purpose, are not touched by a sweep; a kill
/// of a run whose wrapper died still kills by the marker.
pub const KILL: &str = concat!(
    kill_lib!(),
    r#"w=$1;g=$2;shift 2
D1=/dev/shm/.agent-sandbox/run;D2=${TMPDIR:-/tmp}/.agent-sandbox/run
R=;M=;Z=;B=
while read -r a b;do [ "$a" = btime ]&&{ B=$b;break;};done </proc/stat
nu "$B"||B=0
ok(){ st "$1"||return 1;nu "$S"||return 1;u=$(stat -c %Y -- "$2" 2>/dev/null)||return 1;nu "$u"||return 1;u=$((B+S/100-u));[ "$u" -ge -2 ]&&[ "$u" -le 2 ];}
wr(){ cm=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null);case $cm in *" sh $2 "*) return 0;;esac;return 1;}
ad(){ read -r y 2>/dev/null <"$1"||return 0;nu "$y"||return 0;if ok "$y" "$1"&&wr "$y" "$2";then R="$R $y:1";M="$M $2:";elif [ "$3" = 1 ];then M="$M $2:";fi;}
ri(){ h=${1%%.*};case $h in *[!0-9a-f]*) return 1;;esac;[ ${#h} -eq 16 ]&&nu "${1#*.}";}
for d in 1 2;do [ $d = 1 ]&&r=$D1||r=$D2
if [ "$w" = kill ];then od "$r"||continue;for i;do : 2>/dev/null >"$r/$i.k";ad "$r/$i" "$i" 1;done
else [ -d "$r" ]&&[ ! -L "$r" ]&&[ -O "$r" ]&&[ ! -L "${r%/*}" ]||continue;o=$1;n=$2;shift 2
for f in "$r"/*;do i=${f##*/};i=${i%.k}
ri "$i"||continue
case $i in "$o".*) [ "${i#"$o".}" -ge "$n" ]&&continue;;esac
for z;do [ "$z" = "$i" ]&&continue 2;done
case " $Z " in *" $d:$i "*) continue;;esac
Z="$Z $d:$i";ad "$r/$i" "$i" 0;done;set -- "$o" "$n" "$@";fi;done
[ -n "$M" ]&&kt "$g"
for z in $Z;do [ "${z%%:*}" = 1 ]&&r=$D1||r=$D2;rm -f -- "$r/${z#*:}" "$r/${z#*:}.k";done
exit 0"#
);

/// Grace between TERM and KILL, in the tenths of a second [`KILL`] counts.
pub const KILL_GRACE_TENTHS: u32 = 20;

/// `argv` killing the given runs (see [`KILL`]).
pub fn kill_argv(run_ids: &[String]) -> Vec<String> {
    let mut args = vec!["kill".to_owned(), KILL_GRACE_TENTHS.to_string()];
    args.extend(run_ids.iter().cloned());
    script_argv(KILL, args)
}

/// `argv` sweeping every record that is not a live run of this engine.
pub fn sweep_argv(instance: &str, next_counter: u64, live: &[String]) -> Vec<String> {
    let mut args =
        vec!["sweep".to_owned(), KILL_GRACE_TENTHS.to_string(), instance.to_owned(), next_counter.to_string()];
    args.extend(live.iter().cloned());
    script_argv(KILL, args)
}
