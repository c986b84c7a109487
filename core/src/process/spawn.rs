//! Starting a background process: the spawn script's arguments, its reply,
//! and what a broken connection during the start means.

use std::time::Duration;

use bytes::Bytes;

use super::stream::MAX_CAP;
use super::{find, new_id, scripts, ProcessInfo, SpawnRequest, SpawnStdin};
use crate::error::{Error, ErrorCode, Result};
use crate::exec::output::HeaderLine;
use crate::exec::wrapper::{env_pairs, no_nul, push_request, script_argv, NotRun, WrapperEnd};
use crate::exec::{script_status, Call, ExecEngine, ExecTarget, Program, RunOptions, ScriptOutput};

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Starts a process; resolves once it runs. `invalid_request` for bad
/// arguments and `not_found` for a missing cwd, having started nothing.
pub async fn spawn(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
    request: SpawnRequest,
) -> Result<ProcessInfo> {
    spawn_with(engine, target, call, request, false).await
}

/// [`spawn`]; `ephemeral` processes are removed a minute after they exit
/// (the ones behind `exec({ reattach })`, read once).
pub(crate) async fn spawn_with(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
    request: SpawnRequest,
    ephemeral: bool,
) -> Result<ProcessInfo> {
    let SpawnRequest { command, cwd, env, stdin, timeout, max_output_bytes } = request;
    no_nul("command", &command)?;
    no_nul("cwd", &cwd)?;
    if max_output_bytes > MAX_CAP {
        return Err(Error::invalid_request(format!(
            "maxOutputBytes of a process can be at most {MAX_CAP} (64 MiB), got {max_output_bytes}"
        )));
    }
    let env = env_pairs(&env)?;
    let started_at_ms = now_ms();
    let id = new_id(started_at_ms);
    let (stdin_arg, stdin_bytes) = match stdin {
        SpawnStdin::None => (String::new(), None),
        SpawnStdin::Bytes(b) if b.is_empty() => (String::new(), None),
        SpawnStdin::Bytes(b) => (b.len().to_string(), Some(b)),
        SpawnStdin::Open => ("open".to_owned(), None),
    };
    // Cwd, command and env travel on stdin, as for exec (see the wrapper).
    let mut head = Vec::with_capacity(command.len() + cwd.len() + 64);
    let long = push_request(&mut head, &cwd, &command, &env, &id).is_some();
    head.extend_from_slice(stdin_bytes.as_deref().unwrap_or_default());
    let flags = format!("{}{}", if ephemeral { "e" } else { "" }, if long { "c" } else { "" });
    let timeout = timeout.map(|t| format!("{:.3}", t.as_secs_f64().max(0.001))).unwrap_or_default();
    let mut args = vec![
        id.clone(),
        stdin_arg,
        timeout,
        max_output_bytes.to_string(),
        started_at_ms.to_string(),
        command.len().to_string(),
        flags,
        env.len().to_string(),
    ];
    if engine.audit_commands() {
        args.push(command.clone());
    }
    let mut reply = HeaderLine::default();
    let mut sink = ScriptOutput::new(|chunk| {
        reply.feed(chunk);
        Ok(())
    });
    let program = Program::Argv(script_argv(scripts::SPAWN, args));
    let exit = match engine.run(target, program, RunOptions::call(call, Some(Bytes::from(head))), &mut sink).await {
        Ok(exit) => exit,
        // The connection broke: the script may have got far enough to start
        // the process, which then runs whatever we say. Ask the sandbox.
        Err(e) if e.code == ErrorCode::ConnectionLost => return started_after_all(engine, target, call, &id, e).await,
        Err(e) => return Err(e),
    };
    script_status(exit, "starting the process", sink.into_stderr())?;
    let line = String::from_utf8_lossy(reply.line().unwrap_or_default()).into_owned();
    match line.split_once(' ') {
        Some(("ok", pid)) => Ok(ProcessInfo {
            id,
            pid: pid.parse().map_err(|_| Error::internal(format!("the spawn script printed {line:?}")))?,
            command,
            started_at_ms,
            exit: None,
        }),
        // The spawn script's refusals are the wrapper's words.
        _ => Err(WrapperEnd::parse(&line)
            .and_then(|not_run| not_run.not_run_error(&cwd, NotRun::Process))
            .unwrap_or_else(|| Error::internal(format!("the spawn script printed {line:?}")))),
    }
}

/// After a spawn whose connection broke: the process if the sandbox has it
/// (the spawn script finishes in a few milliseconds whether or not anyone is
/// connected), else the original error. Retries while the sandbox cannot be
/// reached, for about ten seconds.
async fn started_after_all(
    engine: &ExecEngine,
    target: &ExecTarget,
    call: &Call,
    id: &str,
    lost: Error,
) -> Result<ProcessInfo> {
    for attempt in 0..20u32 {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(if attempt == 0 { 200 } else { 500 })) => {}
            () = call.cancel.cancelled() => return Err(crate::exec::aborted()),
        }
        match find(engine, target, call, id).await {
            Ok(Some(info)) => return Ok(info),
            Ok(None) => break,
            Err(e) if matches!(e.code, ErrorCode::ConnectionLost | ErrorCode::Unavailable) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Error::new(lost.code, format!("{}; the process was not started", lost.message)))
}
