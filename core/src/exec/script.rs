//! The fixed shell scripts the engine runs in the pod, and the argument vectors
//! that carry a request into them.
//!
//! User input (command, cwd, env, paths) only ever travels as positional
//! arguments (`"$1"`, `"$@"`); it is never spliced into script text, so no
//! quoting bug can turn data into code. The scripts are POSIX `sh` (tested with
//! dash, whose `kill` builtin has no `--`: hence `kill -TERM -"$pgid"`) and
//! need only `mkdir`, `env`, `head` and, for group kill, `setsid` (util-linux
//! or busybox; without it a command runs in the wrapper's group and only its
//! leader can be killed).
//!
//! Run records: each command's process-group id is written to
//! `${TMPDIR:-/tmp}/.agent-sandbox/run/<runid>` while the wrapper waits for it.
//! A kill first drops a tombstone `<runid>.k`, then reads the record; the
//! wrapper first writes the record, then checks for a tombstone. One of the two
//! always sees the other, so a kill that races the start of a command still
//! stops it.

use crate::error::{Error, Result};

/// Interpreter for every script: the one binary the image must have.
pub const SHELL: &str = "/bin/sh";

/// The wrapper around a user command.
///
/// `$1` run id, `$2` cwd (empty: stay in the exec's directory), `$3` command,
/// `$4` stdin byte count (empty: no stdin), `$5…` `NAME=VALUE` pairs.
///
/// Prints one header line on stdout before the command starts: `0` started,
/// `c` the cwd cannot be entered, `r` the run directory cannot be created.
/// The command gets stdin through `head -c <count>`, so it sees EOF after
/// exactly the bytes we send, on v4 servers (which cannot signal EOF) as on
/// v5. A small shell in the group drains what the command left unread:
/// otherwise the server closes its socket with stdin bytes pending, the
/// kernel answers with a reset, and the exit status is lost. (That shell's
/// own stderr is /dev/null so its job reports do not reach the user.) Env pairs are applied by `env` after `setsid` has been found on the
/// pod's own `PATH`, so a user `PATH` cannot break the wrapper. The wrapper
/// itself stays outside the group: it survives the kill, reaps the group
/// leader, removes the record and exits with the command's status.
///
/// Process starts cost about a millisecond each in a pod, so the common path
/// avoids them: `mkdir` only when the run directory is missing, `env` only
/// when there are env pairs, and the record is removed by a detached `rm`
/// (its stdio redirected so the exec does not wait for it). Its
/// `wait` has stderr silenced: dash reports a job killed by a signal
/// ("Terminated") there, which would land in the user's stderr.
pub const WRAPPER: &str = r#"r=${TMPDIR:-/tmp}/.agent-sandbox/run;f=$r/$1;c=$3;n=$4
[ -d "$r" ]||mkdir -p "$r" 2>/dev/null||{ echo r;exit 0;}
if [ -n "$2" ];then CDPATH= cd -- "$2" 2>/dev/null||{ echo c;exit 0;};fi
command -v setsid >/dev/null 2>&1&&g=setsid||g=
shift 4
[ $# -gt 0 ]&&e='env --'||e=
echo 0
if [ -n "$n" ];then exec 3<&0;head -c "$n" <&3 3<&-|$g /bin/sh -c 'env -- "$@" /bin/sh -c "$0" 2>&4 4>&-;s=$?;cat >/dev/null;exit "$s"' "$c" "$@" 3<&- 4>&2 2>/dev/null &
else $g $e "$@" /bin/sh -c "$c" &
fi
p=$!
echo "$p" >"$f"
[ -e "$f.k" ]&&{ kill -KILL -"$p"||kill -KILL "$p";} 2>/dev/null
wait "$p" 2>/dev/null;s=$?
rm -f "$f" "$f.k" </dev/null >/dev/null 2>&1 &
exit "$s""#;

/// Kills recorded process groups: TERM, up to `$2` tenths of a second of
/// grace, then KILL.
///
/// `$1 = kill`: `$3…` are run ids; a tombstone is left for each (see the
/// module doc). `$1 = sweep`: `$3` is this engine's instance id, `$4` its next
/// run counter, `$5…` its live run ids; every other record in the pod is
/// killed and removed, except this engine's runs numbered `$4` or higher
/// (started after the sweep was planned).
pub const KILL: &str = r#"r=${TMPDIR:-/tmp}/.agent-sandbox/run;m=$1;t=$2;shift 2
[ -d "$r" ]||exit 0
l=
if [ "$m" = kill ];then for i;do : >"$r/$i.k";l="$l $i";done
else e=$1;n=$2;shift 2
for f in "$r"/*;do i=${f##*/};i=${i%.k}
case $i in '*') continue;;"$e".*) [ "${i#"$e".}" -ge "$n" ]&&continue;;esac
for a;do [ "$a" = "$i" ]&&continue 2;done
l="$l $i";done;fi
p=
for i in $l;do [ -f "$r/$i" ]&&read q <"$r/$i"&&[ -n "$q" ]&&p="$p $q";done
for q in $p;do kill -TERM -"$q"||kill -TERM "$q";done 2>/dev/null
j=0
while [ "$j" -lt "$t" ];do a=;for q in $p;do kill -0 -"$q" 2>/dev/null&&a=1;done
[ -z "$a" ]&&break;sleep 0.1 2>/dev/null||sleep 1;j=$((j+1));done
for q in $p;do kill -KILL -"$q"||kill -KILL "$q";done 2>/dev/null
[ "$m" = kill ]||for i in $l;do rm -f "$r/$i" "$r/$i.k";done
exit 0"#;

/// Grace between TERM and KILL, in the tenths of a second [`KILL`] counts.
pub const KILL_GRACE_TENTHS: u32 = 20;

/// First stdout line of [`WRAPPER`]: what happened before the command started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrapperHeader {
    /// The command was started.
    Started,
    /// `cd` into the requested cwd failed.
    BadCwd,
    /// The run directory could not be created.
    NoRunDir,
}

impl WrapperHeader {
    /// Parses the header line (without its newline).
    pub fn parse(line: &[u8]) -> Option<Self> {
        match line {
            b"0" => Some(Self::Started),
            b"c" => Some(Self::BadCwd),
            b"r" => Some(Self::NoRunDir),
            _ => None,
        }
    }
}

/// `argv` for `/bin/sh -c <script> sh <args…>`; `$0` is `sh` so the shell's
/// own messages read naturally.
pub fn script_argv(script: &str, args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut argv = vec![SHELL.to_owned(), "-c".to_owned(), script.to_owned(), "sh".to_owned()];
    argv.extend(args);
    argv
}

/// What a user command needs besides its run id.
#[derive(Debug, Clone, Copy)]
pub struct CommandSpec<'a> {
    /// The shell command line.
    pub command: &'a str,
    /// Directory to run in; empty means the exec's default directory.
    pub cwd: &'a str,
    /// Extra environment, applied over the pod's own.
    pub env: &'a [(String, String)],
    /// Number of stdin bytes that will be sent, if any.
    pub stdin_len: Option<usize>,
}

/// Checks a request and builds the wrapper's `argv`. Fails with
/// `invalid_request` before anything runs: bad env names, and NUL bytes
/// anywhere (argv strings cannot carry them).
pub fn wrapper_argv(run_id: &str, spec: &CommandSpec<'_>) -> Result<Vec<String>> {
    no_nul("command", spec.command)?;
    no_nul("cwd", spec.cwd)?;
    let mut args = Vec::with_capacity(4 + spec.env.len());
    args.push(run_id.to_owned());
    args.push(spec.cwd.to_owned());
    args.push(spec.command.to_owned());
    args.push(spec.stdin_len.map(|n| n.to_string()).unwrap_or_default());
    for (name, value) in spec.env {
        validate_env_name(name)?;
        if value.contains('\0') {
            return Err(Error::invalid_request(format!(
                "env variable {name:?}: the value contains a NUL byte, which a process environment cannot hold"
            )));
        }
        args.push(format!("{name}={value}"));
    }
    Ok(script_argv(WRAPPER, args))
}

/// An env name must be a shell identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn validate_env_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_request(format!(
            "env variable name {name:?} is not a shell identifier ([A-Za-z_][A-Za-z0-9_]*); nothing was run"
        )))
    }
}

/// Rejects a NUL byte in an argument, naming the argument.
pub fn no_nul(what: &str, value: &str) -> Result<()> {
    if value.contains('\0') {
        Err(Error::invalid_request(format!("{what} contains a NUL byte")))
    } else {
        Ok(())
    }
}

/// `argv` killing the given runs (see [`KILL`]).
pub fn kill_argv(run_ids: &[String]) -> Vec<String> {
    let mut args = vec!["kill".to_owned(), KILL_GRACE_TENTHS.to_string()];
    args.extend(run_ids.iter().cloned());
    script_argv(KILL, args)
}

/// `argv` sweeping every record that is not a live run of this engine.
pub fn sweep_argv(instance: &str, next_counter: u64, live: &[String]) -> Vec<String> {
    let mut args = vec!["sweep".to_owned(), KILL_GRACE_TENTHS.to_string(), instance.to_owned(), next_counter.to_string()];
    args.extend(live.iter().cloned());
    script_argv(KILL, args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn env_names() {
        for ok in ["A", "_", "PATH", "a_1", "_X9"] {
            validate_env_name(ok).unwrap();
        }
        for bad in ["", "1A", "A-B", "A B", "A=B", "É", "$A", "a.b"] {
            let e = validate_env_name(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRequest);
            assert!(e.message.contains(&format!("{bad:?}")), "{}", e.message);
        }
    }

    #[test]
    fn wrapper_arguments_are_positional() {
        let env = vec![("A".to_owned(), "x'$(y)`z`\n".to_owned())];
        let spec = CommandSpec { command: "echo \"$A\"", cwd: "/w s", env: &env, stdin_len: Some(3) };
        let argv = wrapper_argv("i.1", &spec).unwrap();
        assert_eq!(&argv[..4], &["/bin/sh", "-c", WRAPPER, "sh"]);
        assert_eq!(&argv[4..], &["i.1", "/w s", "echo \"$A\"", "3", "A=x'$(y)`z`\n"]);
        let no_stdin = CommandSpec { stdin_len: None, env: &[], ..spec };
        assert_eq!(wrapper_argv("i.2", &no_stdin).unwrap()[7], "");
    }

    #[test]
    fn bad_env_and_nul_are_rejected() {
        let env = vec![("OK".to_owned(), "v".to_owned()), ("B-AD".to_owned(), "v".to_owned())];
        let spec = CommandSpec { command: "true", cwd: "", env: &env, stdin_len: None };
        assert!(wrapper_argv("i.1", &spec).unwrap_err().message.contains("\"B-AD\""));
        let env = vec![("A".to_owned(), "a\0b".to_owned())];
        let spec = CommandSpec { env: &env, ..spec };
        assert_eq!(wrapper_argv("i.1", &spec).unwrap_err().code, ErrorCode::InvalidRequest);
        let spec = CommandSpec { command: "a\0", env: &[], ..spec };
        assert_eq!(wrapper_argv("i.1", &spec).unwrap_err().code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn headers() {
        assert_eq!(WrapperHeader::parse(b"0"), Some(WrapperHeader::Started));
        assert_eq!(WrapperHeader::parse(b"c"), Some(WrapperHeader::BadCwd));
        assert_eq!(WrapperHeader::parse(b"r"), Some(WrapperHeader::NoRunDir));
        assert_eq!(WrapperHeader::parse(b"x"), None);
    }

    #[test]
    fn control_arguments() {
        assert_eq!(&kill_argv(&["e.1".into()])[4..], &["kill", "20", "e.1"]);
        assert_eq!(&sweep_argv("e", 7, &["e.3".into()])[4..], &["sweep", "20", "e", "7", "e.3"]);
    }
}
