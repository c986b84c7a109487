//! Following a process's output as it is written, waiting for its exit, and
//! `exec` built on them for commands that must outlive a dropped connection.
//!
//! A follower is an exec (`tail -f` on the process's files from the caller's
//! cursor) that ends by itself when the process's waiter exits. A follower
//! whose connection breaks, or whose API server restarts, is started again
//! from the last delivered chunk, so the caller sees every byte exactly once.
//! Followers and waits are killable runs (abort kills them, the orphan sweep
//! cleans up after a dead host) with slots of their own instead of
//! `maxConcurrentExecs`'s: they last as long as the process.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::scripts;
use super::stream::{Cursor, ProcessChunk, ProcessExit, State, MAX_CAP};
use super::{spawn_with, Reader, SpawnRequest, SpawnStdin};
use crate::client::AUTH_GRACE;
use crate::error::{Error, ErrorCode, Result};
use crate::exec::output::HeaderLine;
use crate::exec::trailer::MAX_TRAILER;
use crate::exec::wrapper::{script_argv, ScriptCommand};
use crate::exec::{
    aborted, script_status, Call, Collector, ExecEngine, ExecRequest, ExecResult, ExecTarget, Exit, Flow, Input,
    OutputChunk, Program, RunOptions, ScriptOutput, Sink, Slots,
};

/// Upper bound of stopping a process's tree (TERM, 2 s grace, KILL, plus
/// connection set-up).
const TERMINATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long reconnecting may keep failing before a follower gives up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(300);
/// First and longest pause between reconnects.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// How a [`follow`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Followed {
    /// How the process ended.
    pub exit: ProcessExit,
    /// Some output was past the cap and not kept.
    pub truncated: bool,
}

/// Streams the chunks after `after` to `output` as the process writes them,
/// and resolves with the exit once it has exited and every chunk was
/// delivered. `output` is bounded: a slow consumer slows the reading, the
/// process is never blocked (it writes to files). Cancelling fails with
/// `aborted` and leaves the process running.
pub async fn follow(
    engine: &ExecEngine,
    target: &ExecTarget,
    id: &str,
    after: Option<u64>,
    output: Option<mpsc::Sender<ProcessChunk>>,
    cancel: CancellationToken,
) -> Result<Followed> {
    super::check_id(id)?;
    let mut cursor = after.map(Cursor::from_sequence).transpose()?.unwrap_or_default();
    let mut retry = Retry::new();
    let mut truncated = false;
    loop {
        let mut sink = FollowSink { reader: Reader::new(id, cursor), output: output.clone() };
        // Once the waiter is gone the script reads what is there, up to the
        // page: everything a stream can hold, the trailer included.
        let args = [
            id.to_owned(),
            cursor.stdout.to_string(),
            cursor.stderr.to_string(),
            "follow".to_owned(),
            (MAX_CAP + MAX_TRAILER as u64).to_string(),
        ];
        let command = ScriptCommand::new(scripts::READ, args);
        let ended = engine.run(target, Program::Shell(command.shell()), long_lived(&cancel), &mut sink).await;
        cursor = sink.reader.cursor();
        truncated |= sink.reader.truncated();
        match ended {
            Ok(_) => {
                if let Some(exit) = sink.reader.exit_after_all() {
                    return Ok(Followed { exit, truncated });
                }
                // The waiter exited a moment before a relay wrote the last
                // bytes: read again from where this follower stopped.
                retry.pause(&cancel, None).await?;
            }
            Err(e) if e.code == ErrorCode::NotFound => return Ok(Followed { exit: ProcessExit::LOST, truncated }),
            Err(e) if retry.may_retry(&e) => retry.pause(&cancel, Some(e)).await?,
            Err(e) => return Err(e),
        }
    }
}

/// Resolves with the process's exit once it has exited, also long after.
/// Cancelling fails with `aborted` and leaves the process running.
pub async fn wait(
    engine: &ExecEngine,
    target: &ExecTarget,
    id: &str,
    cancel: CancellationToken,
) -> Result<ProcessExit> {
    super::check_id(id)?;
    let mut retry = Retry::new();
    loop {
        let mut sink = StateSink::default();
        let command = ScriptCommand::new(scripts::WAIT, [id.to_owned()]);
        match engine.run(target, Program::Shell(command.shell()), long_lived(&cancel), &mut sink).await {
            Ok(_) => match sink.header.line().and_then(State::parse) {
                Some(State::Gone) => return Ok(ProcessExit::LOST),
                Some(State::Known { exit: Some(token), .. }) => return Ok(ProcessExit::from_token(&token)),
                Some(State::Known { exit: None, waiter_alive: false, .. }) => return Ok(ProcessExit::LOST),
                Some(State::Known { .. }) => retry.pause(&cancel, None).await?,
                // Killed before its state line: its pod is going (suspend,
                // deletion) or the sandbox killed it. Ask again, as after a
                // lost connection: a pod that is gone is then `lost`.
                None => {
                    let killed = Error::new(ErrorCode::ConnectionLost, "the wait script ended without its state line");
                    retry.pause(&cancel, Some(killed)).await?
                }
            },
            Err(e) if e.code == ErrorCode::NotFound => return Ok(ProcessExit::LOST),
            Err(e) if retry.may_retry(&e) => retry.pause(&cancel, Some(e)).await?,
            Err(e) => return Err(e),
        }
    }
}

/// A user command run as a spawned process and followed to its end: the
/// same result as [`ExecEngine::exec`], but a dropped connection or an API
/// server restart in the middle resumes the reading instead of failing. The
/// timeout is enforced in the sandbox (so it holds while nobody is
/// connected); abort kills the process tree. Output beyond 64 MiB per stream
/// is not kept (`truncated`), for callbacks too.
pub async fn exec_reattached(engine: &ExecEngine, target: &ExecTarget, request: ExecRequest) -> Result<ExecResult> {
    let ExecRequest { command, cwd, env, timeout, stdin, max_output_bytes, output, cancel, reattach: _ } = request;
    if cancel.is_cancelled() {
        return Err(aborted());
    }
    let stdin = match stdin {
        Some(bytes) if !bytes.is_empty() => SpawnStdin::Bytes(bytes),
        _ => SpawnStdin::None,
    };
    let spawn = SpawnRequest { command, cwd, env, stdin, timeout, max_output_bytes: MAX_CAP };
    let info = spawn_with(engine, target, &Call::default(), spawn, true).await?;
    let (tx, mut rx) = mpsc::channel::<ProcessChunk>(16);
    let mut collector = Collector::new(max_output_bytes, output);
    let collect = async {
        while let Some(chunk) = rx.recv().await {
            // The collector never ends a run: its `Flow` is always `More`.
            let _ = collector.output(OutputChunk { stream: chunk.stream, data: chunk.data }).await;
        }
    };
    // An abort kills the tree at once, while the follower's own run is
    // being stopped, not after it.
    let followed_all = CancellationToken::new();
    let following = async {
        let (followed, ()) = tokio::join!(follow(engine, target, &info.id, None, Some(tx), cancel.clone()), collect);
        followed_all.cancel();
        followed
    };
    let stopping = async {
        tokio::select! {
            () = cancel.cancelled() => Some(terminate(engine, target, &info.id).await),
            () = followed_all.cancelled() => None,
        }
    };
    let (followed, terminated) = tokio::join!(following, stopping);
    let followed = match followed {
        Ok(f) => f,
        Err(e) => {
            if terminated.is_none() && (e.code == ErrorCode::Aborted || retryable(&e)) {
                let _ = terminate(engine, target, &info.id).await;
            }
            return Err(e);
        }
    };
    if followed.exit.lost {
        return Err(Error::new(
            ErrorCode::ConnectionLost,
            "the command ended with its pod (suspended or deleted) before it finished; its exit status is unknown",
        ));
    }
    let mut result = collector.result(Exit { exit_code: followed.exit.exit_code, timed_out: followed.exit.timed_out });
    result.truncated |= followed.truncated;
    Ok(result)
}

/// TERM, 2 s of grace, KILL to the process's whole tree.
pub(crate) async fn terminate(engine: &ExecEngine, target: &ExecTarget, id: &str) -> Result<()> {
    let argv = script_argv(scripts::SIGNAL, [id.to_owned(), "terminate".to_owned()]);
    let mut out = ScriptOutput::new(|_| Ok(()));
    let options = RunOptions::call(&Call::within(TERMINATE_TIMEOUT), None);
    let exit = engine.run(target, Program::Argv(argv), options, &mut out).await?;
    script_status(exit, "stopping the process", out.into_stderr())
}

/// A follower's or a wait's run: killable (abort kills it, the orphan sweep
/// finds it after a crash), on a long-lived slot, until the process ends.
fn long_lived(cancel: &CancellationToken) -> RunOptions {
    RunOptions { stdin: Input::None, timeout: None, cancel: cancel.clone(), slots: Slots::LongLived }
}

/// Errors after which reading again may succeed.
fn retryable(e: &Error) -> bool {
    matches!(e.code, ErrorCode::ConnectionLost | ErrorCode::Unavailable)
}

/// Pauses between follower runs: short after a follower that ended by
/// itself, growing while reconnecting fails, for at most [`GIVE_UP_AFTER`].
struct Retry {
    pause: Duration,
    failing_since: Option<Instant>,
}

impl Retry {
    fn new() -> Self {
        Retry { pause: FIRST_PAUSE, failing_since: None }
    }

    /// Whether to try again after `e`: connection trouble, and also a 403
    /// or 401 while reconnecting after it, for [`AUTH_GRACE`] (an API
    /// server that restarts answers them before its authorizer is ready).
    fn may_retry(&self, e: &Error) -> bool {
        retryable(e)
            || (matches!(e.code, ErrorCode::Forbidden | ErrorCode::Config)
                && self.failing_since.is_some_and(|since| since.elapsed() < AUTH_GRACE))
    }

    /// Waits before the next attempt: briefly after a follower that ended by
    /// itself (`failed: None`), longer and longer while reconnecting fails.
    /// `aborted` if cancelled meanwhile; the last error once it has failed
    /// for [`GIVE_UP_AFTER`].
    async fn pause(&mut self, cancel: &CancellationToken, failed: Option<Error>) -> Result<()> {
        let pause = match failed {
            Some(e) => {
                let since = *self.failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > GIVE_UP_AFTER {
                    return Err(Error::new(
                        e.code,
                        format!(
                            "gave up following the process after {} s without reaching it: {}",
                            GIVE_UP_AFTER.as_secs(),
                            e.message
                        ),
                    ));
                }
                let p = self.pause;
                self.pause = (self.pause * 2).min(LONGEST_PAUSE);
                p
            }
            None => {
                self.failing_since = None;
                self.pause = FIRST_PAUSE;
                Duration::from_millis(20)
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => Ok(()),
            () = cancel.cancelled() => Err(aborted()),
        }
    }
}

/// Feeds a follower's output to a [`Reader`] and the chunks to the caller;
/// done once both streams are complete.
struct FollowSink {
    reader: Reader,
    output: Option<mpsc::Sender<ProcessChunk>>,
}

impl Sink for FollowSink {
    async fn output(&mut self, chunk: OutputChunk) -> Result<Flow> {
        let mut chunks = Vec::new();
        self.reader.feed(chunk, |c| chunks.push(c));
        for c in chunks {
            if let Some(tx) = &self.output {
                if tx.send(c).await.is_err() {
                    // Nobody reads any more: stop following.
                    return Ok(Flow::Done);
                }
            }
        }
        Ok(if self.reader.complete() { Flow::Done } else { Flow::More })
    }
}

/// Keeps the first stdout line (the wait script's state line).
#[derive(Default)]
struct StateSink {
    header: HeaderLine,
}

impl Sink for StateSink {
    async fn output(&mut self, chunk: OutputChunk) -> Result<Flow> {
        if chunk.stream == crate::exec::Stream::Stdout {
            self.header.feed(chunk.data);
        }
        Ok(Flow::More)
    }
}
