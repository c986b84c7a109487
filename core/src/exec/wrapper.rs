//! The wrapper around a user command, and the argument vectors that carry a
//! request into the engine's scripts.
//!
//! User input (command, cwd, env, paths) only ever travels as positional
//! arguments (`"$1"`, `"$@"`); it is never spliced into script text, so no
//! quoting bug can turn data into code. The scripts are POSIX `sh` (tested
//! with dash) and need only `mkdir`, `env` and `head` from the image.
//!
//! Run records: `/dev/shm/.agent-sandbox/run/<runid>` (a tmpfs in every
//! container runtime: a file write there costs tens of microseconds, on the
//! container's disk a few hundred), else `${TMPDIR:-/tmp}/.agent-sandbox/run/`,
//! holds the wrapper's pid, the root of the process tree a kill walks (see
//! [`super::kill`], which also checks that the pid still is the wrapper that
//! wrote the record). A kill first drops a tombstone `<runid>.k`, then reads
//! the record; the command's shell checks for the tombstone after the record
//! exists and before it starts the command. One of the two always sees the
//! other, so a kill that races the start of a command still stops it.

use crate::error::{Error, Result};

/// Interpreter for every script: the one binary the image must have.
pub const SHELL: &str = "/bin/sh";

/// Name of the environment variable that marks every process of a run or a
/// spawned process (`<id>:`), so a kill finds them after their parent died.
pub const MARKER: &str = "AGENT_SANDBOX_RUN";

/// The wrapper around a user command.
///
/// `$1` run id, `$2` cwd (empty: stay in the exec's directory), `$3` command,
/// `$4` stdin byte count (empty: no stdin), `$5` cleanup bound (empty: none),
/// `$6` length of a command sent on stdin instead of in `$3` (empty: none),
/// `$7…` `NAME=VALUE` pairs. Stdin starts with the run's secret on a line of
/// its own (made by the engine for each run), then a long command, then the user's bytes.
///
/// A command over [`ARGV_COMMAND_MAX`] bytes goes on stdin, after the secret
/// and ahead of the user's stdin bytes: the exec request's URL carries argv,
/// and API servers refuse URLs beyond about 64 KB (a 100 KB heredoc from an
/// agent would fail with "uri too long"). The wrapper reads it with `head -c`
/// and checks that it ends with the run id (appended by the engine), so a
/// command cut short by a dropped connection is never run (`short`
/// trailer). Then it is one argument of `eval`, as long as the shell takes.
///
/// The command runs in a subshell of the wrapper: `eval` of the command text
/// behind a fixed prefix that applies the env pairs (`export`, after which a
/// user `PATH` no longer matters: only builtins follow) and clears the
/// wrapper's variables, the secret included, and functions. A subshell is a
/// fork, not a program start, so `$$` is still the wrapper's pid and `exit`,
/// traps, `exec` and redirections of the command behave as in `sh -c`. The
/// wrapper's own shell waits for it and then writes the trailer (see
/// [`super::trailer`]) with the secret, which the command never had: a
/// command that prints a trailer of its own (its run id is visible to it) is
/// output, not the end. The one visible difference from `sh -c`: dash
/// prefixes error messages of `eval`ed code with `eval: ` (`sh: 1: eval: foo:
/// not found`). `cwd`, `short` and `rundir` trailers report a command that was
/// never started; the engine ends the exec at the trailers, so children the
/// command left behind (`server &`) keep running without holding the call.
///
/// Run records live in a directory the wrapper makes private (mode 700) and
/// uses only when it is a real directory owned by the running user, not a
/// symlink: a sandbox that points `.agent-sandbox/run` elsewhere gets the
/// other place (or `rundir`), never records written into its workspace.
///
/// Stdin: the command gets it through `head -c <count>`, so it sees EOF after
/// exactly the bytes we send, on v4 servers (which cannot signal EOF) as on
/// v5; a `cat` in the EXIT trap of the command's subshell then drains what
/// the command left unread, also after its `exit` (otherwise the server
/// closes its socket with stdin bytes pending, the kernel answers with a
/// reset, and the trailers and status are lost). Without stdin, the
/// command's stdin is /dev/null.
///
/// A cleanup bound `K` makes the wrapper remove, in the background, the
/// records of this engine's runs numbered below `K` (all finished): the
/// engine asks for it every few hundred runs so records do not pile up.
pub const WRAPPER: &str = r#"i=$1;c=$3;n=$4;k=$5
IFS= read -r s||exit 1
case $s in ''|*[!0-9a-f]*) exit 1;;esac
t(){ printf '\036asb %s %s\n' "$s" "$1";printf '\036asb %s %s\n' "$s" "$1" >&2;}
o(){ for x in "${1%/run}" "$1";do { [ -d "$x" ]&&[ ! -L "$x" ];}||mkdir -m 700 "$x"||return 1;[ ! -L "$x" ]&&[ -O "$x" ]||return 1;done;}
q(){ b=$1;p=${i%.*};set --;for x in "$r/$p".*;do y=${x##*/};y=${y#"$p".};y=${y%.k};case $y in ''|*[!0-9]*) continue;;esac;[ "$y" -lt "$b" ]&&set -- "$@" "$x";done;[ $# -gt 0 ]&&rm -f -- "$@" </dev/null >/dev/null 2>&1 &}
r=/dev/shm/.agent-sandbox/run
{ o "$r"||{ r=${TMPDIR:-/tmp}/.agent-sandbox/run;o "$r";};} 2>/dev/null||{ t rundir;exit 0;}
f=$r/$i;{ echo $$ >"$f";} 2>/dev/null||{ t rundir;exit 0;}
[ -n "$6" ]&&{ c=$(head -c "$6");case $c in *"$i") c=${c%"$i"};; *) t short;exit 0;;esac;}
if [ -n "$2" ];then CDPATH= cd -- "$2" 2>/dev/null||{ t cwd;exit 0;};fi
[ -n "$k" ]&&q "$k"
[ -e "$f.k" ]&&{ t 137;exit 137;}
shift 6
export AGENT_SANDBOX_RUN=$i:
if [ -n "$n" ];then head -c "$n"|(trap 'command -p cat >/dev/null' EXIT;eval "[ \$# -eq 0 ]||export \"\$@\";set --;unset -v b c f i k n p r s x y;unset -f t o q;$c")
else (exec </dev/null;eval "[ \$# -eq 0 ]||export \"\$@\";set --;unset -v b c f i k n p r s x y;unset -f t o q;$c")
fi
e=$?;t "$e";exit "$e""#;

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

/// Commands longer than this (bytes) travel on stdin, not in the URL.
pub const ARGV_COMMAND_MAX: usize = 8 * 1024;

/// The wrapper's `argv`, and the bytes to send ahead of the user's stdin
/// (the secret, and a long command; see [`WRAPPER`]).
#[derive(Debug)]
pub struct WrapperCall {
    /// For the exec request.
    pub argv: Vec<String>,
    /// The secret's line, then a long command and the run id, for the start
    /// of stdin.
    pub stdin_prefix: Vec<u8>,
}

/// Checks a request and builds the wrapper's `argv`. Fails with
/// `invalid_request` before anything runs: bad or reserved env names, and
/// NUL bytes anywhere (argv strings cannot carry them). `secret` is the
/// run's (random, per run); `cleanup` is the bound passed as `$5` (see
/// [`WRAPPER`]).
pub fn wrapper_argv(run_id: &str, secret: &str, spec: &CommandSpec<'_>, cleanup: Option<u64>) -> Result<WrapperCall> {
    no_nul("command", spec.command)?;
    no_nul("cwd", spec.cwd)?;
    let on_stdin = spec.command.len() > ARGV_COMMAND_MAX;
    let mut args = Vec::with_capacity(6 + spec.env.len());
    args.push(run_id.to_owned());
    args.push(spec.cwd.to_owned());
    args.push(if on_stdin { String::new() } else { spec.command.to_owned() });
    args.push(spec.stdin_len.map(|n| n.to_string()).unwrap_or_default());
    args.push(cleanup.map(|n| n.to_string()).unwrap_or_default());
    let long_command = on_stdin.then(|| [spec.command.as_bytes(), run_id.as_bytes()].concat());
    args.push(long_command.as_ref().map(|p| p.len().to_string()).unwrap_or_default());
    args.extend(env_pairs(spec.env)?);
    let mut stdin_prefix = Vec::with_capacity(secret.len() + 1 + long_command.as_ref().map_or(0, Vec::len));
    stdin_prefix.extend_from_slice(secret.as_bytes());
    stdin_prefix.push(b'\n');
    stdin_prefix.extend(long_command.unwrap_or_default());
    Ok(WrapperCall { argv: script_argv(WRAPPER, args), stdin_prefix })
}

/// Prefix of the environment names the provider uses itself (the kill
/// marker [`MARKER`]); a caller's env may not set them.
pub const RESERVED_ENV_PREFIX: &str = "AGENT_SANDBOX_";

/// `NAME=VALUE` arguments for the scripts, each name checked.
pub fn env_pairs(env: &[(String, String)]) -> Result<Vec<String>> {
    env.iter()
        .map(|(name, value)| {
            validate_env_name(name)?;
            if value.contains('\0') {
                return Err(Error::invalid_request(format!(
                    "env variable {name:?}: the value contains a NUL byte, which a process environment cannot hold"
                )));
            }
            Ok(format!("{name}={value}"))
        })
        .collect()
}

/// An env name must be a shell identifier (`[A-Za-z_][A-Za-z0-9_]*`) and
/// not one the provider reserves ([`RESERVED_ENV_PREFIX`]): overriding the
/// kill marker would let a command's processes escape its timeout.
pub fn validate_env_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    if !ok {
        return Err(Error::invalid_request(format!(
            "env variable name {name:?} is not a shell identifier ([A-Za-z_][A-Za-z0-9_]*); nothing was run"
        )));
    }
    if name.starts_with(RESERVED_ENV_PREFIX) {
        return Err(Error::invalid_request(format!(
            "env variable name {name:?} is reserved: the provider uses {RESERVED_ENV_PREFIX}* names itself; nothing was run"
        )));
    }
    Ok(())
}

/// Rejects a NUL byte in an argument, naming the argument.
pub fn no_nul(what: &str, value: &str) -> Result<()> {
    if value.contains('\0') {
        Err(Error::invalid_request(format!("{what} contains a NUL byte")))
    } else {
        Ok(())
    }
}

/// How the wrapper reported the end of a command, from its trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrapperEnd {
    /// The command ran and exited with this status.
    Exited(i32),
    /// `cd` into the requested cwd failed; nothing ran.
    BadCwd,
    /// The run directory could not be created; nothing ran.
    NoRunDir,
    /// A command sent on stdin arrived incomplete; nothing ran.
    ShortCommand,
}

impl WrapperEnd {
    /// Parses a trailer's status token.
    pub fn parse(token: &str) -> Option<Self> {
        match token {
            "cwd" => Some(Self::BadCwd),
            "rundir" => Some(Self::NoRunDir),
            "short" => Some(Self::ShortCommand),
            n => n.parse().ok().map(Self::Exited),
        }
    }
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
        for bad in ["", "1A", "A-B", "A B", "A=B", "É", "$A", "a.b", "AGENT_SANDBOX_RUN", "AGENT_SANDBOX_X"] {
            let e = validate_env_name(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRequest);
            assert!(e.message.contains(&format!("{bad:?}")), "{}", e.message);
        }
    }

    #[test]
    fn wrapper_arguments_are_positional() {
        let env = vec![("A".to_owned(), "x'$(y)`z`\n".to_owned())];
        let spec = CommandSpec { command: "echo \"$A\"", cwd: "/w s", env: &env, stdin_len: Some(3) };
        let call = wrapper_argv("i.1", "5ec", &spec, Some(7)).unwrap();
        assert_eq!(&call.argv[..4], &["/bin/sh", "-c", WRAPPER, "sh"]);
        assert_eq!(&call.argv[4..], &["i.1", "/w s", "echo \"$A\"", "3", "7", "", "A=x'$(y)`z`\n"]);
        // The secret travels on stdin only.
        assert_eq!(call.stdin_prefix, b"5ec\n");
        assert!(!call.argv.iter().any(|a| a.contains("5ec")));
        let no_stdin = CommandSpec { stdin_len: None, env: &[], ..spec };
        assert_eq!(&wrapper_argv("i.2", "5ec", &no_stdin, None).unwrap().argv[7..], &["", "", ""]);
        // A long command goes on stdin after the secret, followed by the run id.
        let long = "x".repeat(ARGV_COMMAND_MAX + 1);
        let call = wrapper_argv("i.3", "5ec", &CommandSpec { command: &long, ..no_stdin }, None).unwrap();
        assert_eq!(&call.argv[6..10], &["", "", "", &(long.len() + 3).to_string()]);
        assert_eq!(call.stdin_prefix, [b"5ec\n", long.as_bytes(), b"i.3"].concat());
    }

    #[test]
    fn bad_env_and_nul_are_rejected() {
        let env = vec![("OK".to_owned(), "v".to_owned()), ("B-AD".to_owned(), "v".to_owned())];
        let spec = CommandSpec { command: "true", cwd: "", env: &env, stdin_len: None };
        assert!(wrapper_argv("i.1", "5ec", &spec, None).unwrap_err().message.contains("\"B-AD\""));
        let env = vec![("A".to_owned(), "a\0b".to_owned())];
        let spec = CommandSpec { env: &env, ..spec };
        assert_eq!(wrapper_argv("i.1", "5ec", &spec, None).unwrap_err().code, ErrorCode::InvalidRequest);
        let spec = CommandSpec { command: "a\0", env: &[], ..spec };
        assert_eq!(wrapper_argv("i.1", "5ec", &spec, None).unwrap_err().code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn trailer_tokens() {
        assert_eq!(WrapperEnd::parse("0"), Some(WrapperEnd::Exited(0)));
        assert_eq!(WrapperEnd::parse("137"), Some(WrapperEnd::Exited(137)));
        assert_eq!(WrapperEnd::parse("cwd"), Some(WrapperEnd::BadCwd));
        assert_eq!(WrapperEnd::parse("rundir"), Some(WrapperEnd::NoRunDir));
        assert_eq!(WrapperEnd::parse("x"), None);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn status_tokens_round_trip(code in any::<i32>()) {
            prop_assert_eq!(WrapperEnd::parse(&code.to_string()), Some(WrapperEnd::Exited(code)));
        }
    }
}
