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
//! command in between. A process that both leaves the tree and clears its
//! environment escapes.

use super::wrapper::script_argv;

/// Kills recorded runs: TERM, up to `$2` tenths of a second of grace, then
/// KILL. `$1 = kill`: `$3…` are run ids (see `kill_argv`); `$1 = hangup`:
/// the same with HUP first (a terminal's close); `$1 = signal`: `$2` is a
/// signal name sent to the runs' trees, nothing more. `$1 = sweep`:
/// `$3` is this engine's instance id, `$4` its next run counter, `$5…` its
/// live run ids; every other record in the pod is removed, and the runs still
/// going in them killed (see `sweep_argv`). The script,
/// `core/src/exec/sh/kill.sh` with the tree kill of `lib-kill.sh`, says how a
/// forged record is kept from pointing the kill at another process.
pub const KILL: &str = in_pod_script!("exec/sh/kill.sh");

/// Grace between TERM and KILL, in the tenths of a second [`KILL`] counts.
pub(crate) const KILL_GRACE_TENTHS: u32 = 20;

/// What a kill does to a run's tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KillMode {
    /// TERM, the grace, KILL: the tree is gone after it.
    Terminate,
    /// HUP (what a terminal's hangup sends), the grace, KILL.
    Hangup,
    /// Just this signal (a name of [`SIGNALS`]), to every process of the tree.
    Signal(&'static str),
}

/// The signal names [`KillMode::Signal`] takes.
pub(crate) const SIGNALS: &[&str] = &["HUP", "INT", "QUIT", "TERM", "KILL", "USR1", "USR2", "WINCH", "STOP", "CONT"];

/// `argv` killing the given runs (see [`KILL`]).
pub(crate) fn kill_argv(run_ids: &[String], mode: KillMode) -> Vec<String> {
    let grace = KILL_GRACE_TENTHS.to_string();
    let (verb, second) = match mode {
        KillMode::Terminate => ("kill", grace),
        KillMode::Hangup => ("hangup", grace),
        KillMode::Signal(name) => ("signal", name.to_owned()),
    };
    let mut args = vec![verb.to_owned(), second];
    args.extend(run_ids.iter().cloned());
    script_argv(KILL, args)
}

/// `argv` sweeping every record that is not a live run of this engine.
pub(crate) fn sweep_argv(instance: &str, next_counter: u64, live: &[String]) -> Vec<String> {
    let mut args =
        vec!["sweep".to_owned(), KILL_GRACE_TENTHS.to_string(), instance.to_owned(), next_counter.to_string()];
    args.extend(live.iter().cloned());
    script_argv(KILL, args)
}
