//! The scripts behind spawned processes (`core/src/process/sh/`, the shared
//! parts in `lib-*.sh` there and in `core/src/exec/sh/`). Everything about a
//! process lives in `${TMPDIR:-/tmp}/.agent-sandbox/proc/<id>/`:
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
//! | `k` | the provider sent a signal (`kill`) |
//! | `m` | remove a minute after the exit (`exec({ reattach })`'s processes) |
//! | `x` | the exit status, `timeout` or `s<n>` (killed by the provider with signal n), written by the waiter |
//!
//! The waiter is a detached shell that starts the command with
//! `AGENT_SANDBOX_RUN=p<id>:` in its environment (the kill marker), waits for
//! it, writes `x` and then the trailer (see `crate::exec::trailer`) into both
//! FIFOs. A relay per stream copies its FIFO into the file up to the cap and
//! then discards the rest. Readers resume from byte offsets (see
//! `super::stream`), so any number of them, from any host, see the same
//! bytes. Exited processes are removed an hour after they exit, or sooner
//! when more than 64 exited ones are kept.
//!
//! Arguments travel as `$1…` (see `crate::exec::wrapper`); ids and numbers
//! are checked by the caller. All need `mkfifo`, `head`, `cat`, `tail` (GNU:
//! `-f --pid`), `stat`, `stdbuf`, `touch`, `rm`, `env`, `sleep` from the image.

#[cfg(doc)]
use crate::exec::trailer::MAX_TRAILER;

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
pub const SPAWN: &str = in_pod_script!("process/sh/spawn.sh");

/// Reads a process's output. `$1` id, `$2` stdout offset, `$3` stderr
/// offset, `$4` `poll` (what is there now, at most `$5` bytes of each
/// stream) or `follow` (and then everything written until the waiter
/// exits). Prints the state line (see the module), then the bytes of `1`
/// from `$2` on stdout and of `2` from `$3` on stderr; `gone` when the
/// process is unknown.
pub const READ: &str = in_pod_script!("process/sh/read.sh");

/// Waits until a process's waiter is gone, then prints the state line.
/// `$1` id.
pub const WAIT: &str = in_pod_script!("process/sh/wait.sh");

/// Exit statuses of [`STDIN`] besides 0 and the [`READ`] `gone` line.
pub use crate::script_exit::{PROCESS_EXITED, STDIN_CLOSED, STDIN_NOT_OPEN};

/// `$1` id, `$2` `write` (`$3` bytes follow on stdin) or `close`. Writes
/// into the stdin FIFO (opened read-write, so it never blocks on open), or
/// closes stdin by ending the process that holds the FIFO open.
pub const STDIN: &str = in_pod_script!("process/sh/stdin.sh");

/// `$1` id, `$2` signal name: sends it (twice, to catch children forked in
/// between) to every process carrying the process's marker and to their
/// descendants: the whole tree, grandchildren whose parent died included.
/// `$2 = terminate`: TERM, 2 s of grace, KILL. Except for STOP and CONT it
/// first leaves `k`, so the waiter records a death by signal as the
/// provider's doing (`s<n>` in `x`).
pub const SIGNAL: &str = in_pod_script!("process/sh/signal.sh");

/// Lists processes. `$1` an id to list only that one (empty: all), `$2`
/// most entries, `$3` most bytes of each command. Prints per process a line
/// `<id> <pid> <started ms> <x or -> <waiter alive 0|1>`, then the head of
/// its command text and a NUL (commands cannot hold NUL bytes); `more` after
/// `$2` entries; a line `.` at the end. Linear in the number of processes
/// (one `head` each), whatever the sandbox left in the directory.
pub const LIST: &str = in_pod_script!("process/sh/list.sh");
