//! The wrapper around a user command, and the argument vectors that carry a
//! request into the engine's scripts.
//!
//! User input (command, cwd, env, paths) only ever travels as positional
//! arguments (`"$1"`, `"$@"`); it is never spliced into script text, so no
//! quoting bug can turn data into code. The scripts are POSIX `sh` (tested
//! with dash); the wrapper needs only `mkdir`, `head`, `cat` and `rm` from
//! the image (the shell itself exports the env pairs: no `env` program).
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

use super::runtime::TerminalSize;
use crate::error::{quoted, Error, ErrorCode, Result};

/// Interpreter for every script: the one binary the image must have.
pub(crate) const SHELL: &str = "/bin/sh";

/// The wrapper around a user command.
///
/// `$1` run id, `$2` stdin byte count (empty: no stdin; `-`: the command
/// reads the exec's stdin itself, a stream or a terminal, see
/// [`CommandStdin`]), `$3` cleanup bound
/// (empty: none), `$4` length of a long command sent after the fields
/// (empty: none), `$5` number of env pairs, `$6` a terminal's `<cols> <rows>`
/// (empty: no terminal). Stdin starts with the run's
/// secret on a line of its own (made by the engine for each run), then the
/// request's fields (each a line count, then that many lines): cwd (empty: stay in the exec's
/// directory), the command (empty when long) and `$5` `NAME=VALUE` pairs;
/// then a long command and the run id, then the user's bytes.
///
/// Command, cwd and env travel on stdin, not in argv: the exec request's URL
/// carries argv, and API servers write the URL of every request to their
/// audit log (`requestURI`, at every audit level), where an agent's
/// `env: { GITHUB_TOKEN }` must not land; in the pod, a shell's argv is
/// `/proc/<pid>/cmdline`, readable by every uid, for as long as the command
/// runs. So the URL and argv carry only the run id and numbers (unless the
/// provider is asked to put commands in the audit log: then the command is
/// one more argument the wrapper ignores).
///
/// A command over [`INLINE_COMMAND_MAX`] bytes comes after the fields, and
/// the wrapper reads it with `head -c` and checks that it ends with the run
/// id (appended by the engine), so a command cut short by a dropped
/// connection is never run (`short` trailer, as for fields cut short).
/// Then it is one argument of `eval`, as long as the shell takes.
///
/// The script, `core/src/exec/sh/wrapper.sh`, says how and why: the command
/// runs in a subshell (as in `sh -c`, but without the wrapper's variables, the
/// secret among them) and the wrapper then writes the trailer (see
/// `super::trailer`) with the secret, which the command never had; `cwd`,
/// `short` and `rundir` trailers report a command that was never started.
/// The engine ends the exec at the trailers, so children the command left
/// behind (`server &`) keep running without holding the call. Stdin reaches
/// the command through `head -c <count>` (EOF after exactly the bytes sent,
/// on v4 servers too), else it is /dev/null. A cleanup bound `K` makes the
/// wrapper remove, in the background, the records of this engine's runs
/// numbered below `K`.
///
/// On a terminal (`$6`), the line discipline would echo the secret and the
/// fields back and act on their control bytes as they arrive, so the
/// wrapper first sets its terminal raw and unechoed and prints
/// `\x1easb ready`; the engine sends the prefix only then. Before the
/// command runs it restores the terminal's mode, applies the size with
/// `stty` (whether or not the resize message arrived first) and prints
/// `\x1easb started <pid>`; the engine hides both lines and what came
/// before them. The command then has the terminal as its stdin.
pub const WRAPPER: &str = in_pod_script!("exec/sh/wrapper.sh");

/// `argv` for `/bin/sh -c <script> sh <args…>`; `$0` is `sh` so the shell's
/// own messages read naturally.
pub fn script_argv(script: &str, args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut argv = vec![SHELL.to_owned(), "-c".to_owned(), script.to_owned(), "sh".to_owned()];
    argv.extend(args);
    argv
}

/// A shell command line as the wrapper runs it.
#[derive(Debug, Clone, Copy)]
pub struct Shell<'a> {
    /// The shell command line.
    pub command: &'a str,
    /// Directory to run in; empty means the exec's default directory.
    pub cwd: &'a str,
    /// Extra environment, applied over the pod's own.
    pub env: &'a [(String, String)],
}

/// One of the engine's scripts as a command of the wrapper, for the runs
/// that must be killable (a follower, a wait): its arguments become env
/// pairs, which travel on stdin like the command, and the command first
/// makes them its positional parameters again.
#[derive(Debug)]
pub struct ScriptCommand {
    command: String,
    env: Vec<(String, String)>,
}

/// Prefix of the env names that carry a [`ScriptCommand`]'s arguments.
const SCRIPT_ARG: &str = "ASB_";

impl ScriptCommand {
    /// `script` run with `args` as `$1…`.
    pub fn new(script: &str, args: impl IntoIterator<Item = String>) -> Self {
        let env: Vec<(String, String)> =
            args.into_iter().enumerate().map(|(i, arg)| (format!("{SCRIPT_ARG}{}", i + 1), arg)).collect();
        let mut command = String::from("set --");
        for (name, _) in &env {
            command.push_str(&format!(" \"${name}\""));
        }
        command.push('\n');
        command.push_str(script);
        ScriptCommand { command, env }
    }

    /// The command for the wrapper (in the exec's default directory).
    pub fn shell(&self) -> Shell<'_> {
        Shell { command: &self.command, cwd: "", env: &self.env }
    }
}

/// What a user command reads, as the wrapper's `$2` and `$6` say it.
#[derive(Debug, Clone, Copy)]
pub enum CommandStdin {
    /// Nothing (`/dev/null`).
    None,
    /// This many bytes, then EOF.
    Bytes(usize),
    /// A stream the command reads itself to an end it knows: no EOF comes.
    Stream,
    /// A terminal of this size (see [`WRAPPER`]), which the command reads
    /// itself.
    Terminal(TerminalSize),
}

/// Commands longer than this (bytes) are read with one `head -c` rather
/// than line by line with `read` (see [`WRAPPER`]); about where the two
/// cost the same.
pub const INLINE_COMMAND_MAX: usize = 2 * 1024;

/// The wrapper's `argv`, and the bytes to send ahead of the user's stdin
/// (the secret, the fields and a long command; see [`WRAPPER`]).
#[derive(Debug)]
pub struct WrapperCall {
    /// For the exec request: the run id and numbers only.
    pub argv: Vec<String>,
    /// The secret's line, the fields, then a long command and the run id,
    /// for the start of stdin.
    pub stdin_prefix: Vec<u8>,
}

/// Checks a command and builds the wrapper's `argv` and stdin prefix for
/// it, reading `stdin`. Fails with `invalid_request` before anything runs:
/// bad or reserved env names, env beyond what a process can hold, and NUL
/// bytes anywhere. `secret` is the run's (random, per run); `cleanup` is
/// the bound passed as `$3`; `audit` adds the command to argv for the API
/// server's audit log (see [`WRAPPER`]).
pub fn wrapper_argv(
    run_id: &str,
    secret: &str,
    shell: &Shell<'_>,
    stdin: CommandStdin,
    cleanup: Option<u64>,
    audit: bool,
) -> Result<WrapperCall> {
    no_nul("command", shell.command)?;
    no_nul("cwd", shell.cwd)?;
    let env = env_pairs(shell.env)?;
    let mut prefix = Vec::with_capacity(secret.len() + shell.command.len() + shell.cwd.len() + 64);
    prefix.extend_from_slice(secret.as_bytes());
    prefix.push(b'\n');
    let long = push_request(&mut prefix, shell.cwd, shell.command, &env, run_id);
    let mut args = vec![
        run_id.to_owned(),
        match stdin {
            CommandStdin::None => String::new(),
            CommandStdin::Bytes(len) => len.to_string(),
            CommandStdin::Stream | CommandStdin::Terminal(_) => "-".to_owned(),
        },
        cleanup.map(|n| n.to_string()).unwrap_or_default(),
        long.map(|n| n.to_string()).unwrap_or_default(),
        env.len().to_string(),
        match stdin {
            CommandStdin::Terminal(size) => format!("{} {}", size.cols, size.rows),
            _ => String::new(),
        },
    ];
    if audit {
        args.push(shell.command.to_owned());
    }
    Ok(WrapperCall { argv: script_argv(WRAPPER, args), stdin_prefix: prefix })
}

/// Appends a request as the exec wrapper and the spawn script read it:
/// the fields cwd, command (empty when over [`INLINE_COMMAND_MAX`]) and the
/// env `pairs`, then a long command followed by `id`, so a command cut short
/// is never run. Returns the long command's length with `id`, `None` when
/// the command went in its field.
pub(crate) fn push_request(out: &mut Vec<u8>, cwd: &str, command: &str, pairs: &[String], id: &str) -> Option<usize> {
    let long = command.len() > INLINE_COMMAND_MAX;
    push_field(out, cwd);
    push_field(out, if long { "" } else { command });
    for pair in pairs {
        push_field(out, pair);
    }
    long.then(|| {
        out.extend_from_slice(command.as_bytes());
        out.extend_from_slice(id.as_bytes());
        command.len() + id.len()
    })
}

/// Appends a field as the scripts read it (see [`WRAPPER`]): its line count, then its
/// lines (a value without a newline is one line; `a\n` is `a` and an empty
/// line).
pub(crate) fn push_field(out: &mut Vec<u8>, value: &str) {
    let lines = value.bytes().filter(|b| *b == b'\n').count() + 1;
    out.extend_from_slice(lines.to_string().as_bytes());
    out.push(b'\n');
    out.extend_from_slice(value.as_bytes());
    out.push(b'\n');
}

/// The most bytes one `NAME=VALUE` pair may have: Linux refuses to start a
/// program whose environment holds a longer string (`MAX_ARG_STRLEN`), so
/// every command of the run would fail with "Argument list too long".
pub(crate) const MAX_ENV_PAIR: usize = 128 * 1024 - 1;

/// The most bytes all pairs of a request may have together, well inside
/// what Linux lets a program start with (`ARG_MAX`, usually 2 MiB, shared
/// with the pod's own environment and the arguments).
pub(crate) const MAX_ENV_TOTAL: usize = 1024 * 1024;

/// Prefix of the environment names the provider uses itself (the kill
/// marker `AGENT_SANDBOX_RUN` that the scripts set on every process of a
/// run or spawned process); a caller's env may not set them.
pub(crate) const RESERVED_ENV_PREFIX: &str = "AGENT_SANDBOX_";

/// `NAME=VALUE` pairs for the scripts, each name checked, each pair and all
/// of them within what a process environment can hold.
pub(crate) fn env_pairs(env: &[(String, String)]) -> Result<Vec<String>> {
    let mut total = 0usize;
    env.iter()
        .map(|(name, value)| {
            validate_env_name(name)?;
            if value.contains('\0') {
                return Err(Error::invalid_request(format!(
                    "env variable {name:?}: the value contains a NUL byte, which a process environment cannot hold"
                )));
            }
            let pair = format!("{name}={value}");
            total += pair.len();
            if pair.len() > MAX_ENV_PAIR {
                return Err(Error::invalid_request(format!(
                    "env variable {name:?}: {} bytes with its name, more than the {MAX_ENV_PAIR} a process \
                     environment can hold in one variable; nothing was run",
                    pair.len()
                )));
            }
            if total > MAX_ENV_TOTAL {
                return Err(Error::invalid_request(format!(
                    "env: more than {MAX_ENV_TOTAL} bytes in all (at {name:?}); nothing was run"
                )));
            }
            Ok(pair)
        })
        .collect()
}

/// The names a POSIX shell sets for itself when it starts (`IFS` to space,
/// tab and newline, `PWD` to its working directory, `PPID`, `OPTIND` to 1,
/// `LINENO`), whatever its environment says: a spawned command's fresh
/// `/bin/sh` would ignore a caller's value, and exec's and a terminal's
/// command, evaluated in a subshell of the wrapper, would take it. Refused,
/// so that no value is silently dropped and the three behave alike; `cwd`
/// chooses the directory.
pub(crate) const SHELL_OWN_ENV: [&str; 5] = ["IFS", "LINENO", "OPTIND", "PPID", "PWD"];

/// An env name must be a shell identifier (`[A-Za-z_][A-Za-z0-9_]*`), not
/// one the provider reserves ([`RESERVED_ENV_PREFIX`]: overriding the kill
/// marker would let a command's processes escape its timeout) and not one
/// the shell sets itself ([`SHELL_OWN_ENV`]). Every other name reaches the
/// command exactly: the scripts export the pairs after their own variables
/// are gone.
pub(crate) fn validate_env_name(name: &str) -> Result<()> {
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
    if SHELL_OWN_ENV.contains(&name) {
        return Err(Error::invalid_request(format!(
            "env variable name {name:?} is reserved: the command's shell sets it itself ({}; use `cwd` for the \
             directory); nothing was run",
            SHELL_OWN_ENV.join(", ")
        )));
    }
    Ok(())
}

/// Rejects a NUL byte in an argument, naming the argument.
pub(crate) fn no_nul(what: &str, value: &str) -> Result<()> {
    if value.contains('\0') {
        Err(Error::invalid_request(format!("{what} contains a NUL byte")))
    } else {
        Ok(())
    }
}

/// How the wrapper reported the end of a command, from its trailer (the
/// spawn script's reply uses the same words for a process it did not start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WrapperEnd {
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
    pub(crate) fn parse(token: &str) -> Option<Self> {
        match token {
            "cwd" => Some(Self::BadCwd),
            "rundir" => Some(Self::NoRunDir),
            "short" => Some(Self::ShortCommand),
            n => n.parse().ok().map(Self::Exited),
        }
    }

    /// The error for an end that says nothing ran (`None` for
    /// [`WrapperEnd::Exited`]): a command of the exec wrapper, or a
    /// process of the spawn script; `cwd` as requested.
    pub(crate) fn not_run_error(self, cwd: &str, what: NotRun) -> Option<Error> {
        let (nothing, dir) = match what {
            NotRun::Command => ("nothing was run", "run"),
            NotRun::Process => ("nothing was started", "proc"),
        };
        Some(match self {
            WrapperEnd::Exited(_) => return None,
            WrapperEnd::BadCwd => Error::new(
                ErrorCode::NotFound,
                format!("cwd {} does not exist or is not an accessible directory; {nothing}", quoted(cwd)),
            ),
            WrapperEnd::ShortCommand => Error::new(
                ErrorCode::ConnectionLost,
                match what {
                    NotRun::Command => format!("the command did not arrive completely on the exec's stdin; {nothing}"),
                    NotRun::Process => format!("stdin did not arrive completely; {nothing}"),
                },
            ),
            WrapperEnd::NoRunDir => Error::internal(format!(
                "cannot create ${{TMPDIR:-/tmp}}/.agent-sandbox/{dir} in the sandbox (is the filesystem read-only? \
                 set TMPDIR in the pod to a writable directory); {nothing}"
            )),
        })
    }
}

/// What [`WrapperEnd::not_run_error`] reports did not run.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NotRun {
    /// A command (exec, terminal, transfer, follower).
    Command,
    /// A spawned process.
    Process,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn env_names() {
        for ok in ["A", "_", "PATH", "a_1", "_X9", "OLDPWD", "ifs", "PWD_"] {
            validate_env_name(ok).unwrap();
        }
        for bad in
            ["", "1A", "A-B", "A B", "A=B", "É", "$A", "a.b", "AGENT_SANDBOX_RUN", "AGENT_SANDBOX_X", "IFS", "PWD"]
        {
            let e = validate_env_name(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRequest);
            assert!(e.message.contains(&format!("{bad:?}")), "{}", e.message);
        }
    }

    #[test]
    fn requests_travel_on_stdin_and_argv_holds_only_the_run_id_and_numbers() {
        let env = vec![("A".to_owned(), "x'$(y)`z`\n".to_owned())];
        let shell = Shell { command: "echo \"$A\"", cwd: "/w s", env: &env };
        let call = wrapper_argv("i.1", "5ec", &shell, CommandStdin::Bytes(3), Some(7), false).unwrap();
        assert_eq!(&call.argv[..4], &["/bin/sh", "-c", WRAPPER, "sh"]);
        assert_eq!(&call.argv[4..], &["i.1", "3", "7", "", "1", ""]);
        // Secret, then cwd, command and the pair, each a line count and lines.
        assert_eq!(call.stdin_prefix, b"5ec\n1\n/w s\n1\necho \"$A\"\n2\nA=x'$(y)`z`\n\n");
        let plain = Shell { env: &[], cwd: "", ..shell };
        let call = wrapper_argv("i.2", "5ec", &plain, CommandStdin::None, None, false).unwrap();
        assert_eq!(&call.argv[4..], &["i.2", "", "", "", "0", ""]);
        assert_eq!(call.stdin_prefix, b"5ec\n1\n\n1\necho \"$A\"\n");
        // A stream and a terminal are read by the command itself (`-`); a
        // terminal's size is `$6`.
        assert_eq!(
            &wrapper_argv("i.2", "5ec", &plain, CommandStdin::Stream, None, false).unwrap().argv[4..],
            &["i.2", "-", "", "", "0", ""]
        );
        let tty = CommandStdin::Terminal(TerminalSize { cols: 80, rows: 24 });
        assert_eq!(
            &wrapper_argv("i.2", "5ec", &plain, tty, None, false).unwrap().argv[4..],
            &["i.2", "-", "", "", "0", "80 24"]
        );
        // A long command comes after the fields, followed by the run id.
        let long = "x".repeat(INLINE_COMMAND_MAX + 1);
        let call =
            wrapper_argv("i.3", "5ec", &Shell { command: &long, ..plain }, CommandStdin::None, None, false).unwrap();
        assert_eq!(&call.argv[4..], &["i.3", "", "", &(long.len() + 3).to_string(), "0", ""]);
        assert_eq!(call.stdin_prefix, [b"5ec\n1\n\n1\n\n", long.as_bytes(), b"i.3"].concat());
        // Asked to, the command (and only it) goes into argv for the audit log.
        let call = wrapper_argv("i.4", "5ec", &shell, CommandStdin::Bytes(3), None, true).unwrap();
        assert_eq!(call.argv.last().unwrap(), "echo \"$A\"");
        assert!(!call.argv.iter().any(|a| a.contains("x'$(y)") || a.contains("/w s") || a.contains("5ec")));
    }

    #[test]
    fn env_beyond_what_a_process_can_hold_is_refused() {
        let big = |n: usize| vec![("A".to_owned(), "v".repeat(n))];
        assert!(env_pairs(&big(MAX_ENV_PAIR - 2)).is_ok());
        let e = env_pairs(&big(MAX_ENV_PAIR - 1)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert!(e.message.contains("\"A\"") && !e.message.contains("vvvv"), "{}", e.message);
        let many: Vec<_> = (0..9).map(|i| (format!("V{i}"), "v".repeat(MAX_ENV_TOTAL / 8))).collect();
        assert_eq!(env_pairs(&many).unwrap_err().code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn bad_env_and_nul_are_rejected() {
        let env = vec![("OK".to_owned(), "v".to_owned()), ("B-AD".to_owned(), "v".to_owned())];
        let shell = Shell { command: "true", cwd: "", env: &env };
        let none = CommandStdin::None;
        assert!(wrapper_argv("i.1", "5ec", &shell, none, None, false).unwrap_err().message.contains("\"B-AD\""));
        let env = vec![("A".to_owned(), "a\0b".to_owned())];
        let shell = Shell { env: &env, ..shell };
        assert_eq!(wrapper_argv("i.1", "5ec", &shell, none, None, false).unwrap_err().code, ErrorCode::InvalidRequest);
        let shell = Shell { command: "a\0", env: &[], ..shell };
        assert_eq!(wrapper_argv("i.1", "5ec", &shell, none, None, false).unwrap_err().code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn a_script_command_takes_its_arguments_from_env() {
        let script = ScriptCommand::new("echo \"$2$1\"", ["a b".to_owned(), "$(x)".to_owned()]);
        let shell = script.shell();
        assert_eq!(shell.command, "set -- \"$ASB_1\" \"$ASB_2\"\necho \"$2$1\"");
        assert_eq!(shell.env, [("ASB_1".to_owned(), "a b".to_owned()), ("ASB_2".to_owned(), "$(x)".to_owned())]);
        assert_eq!(shell.cwd, "");
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
