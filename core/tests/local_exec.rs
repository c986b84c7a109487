//! The exec engine over [`common::LocalRuntime`] (local processes, the real
//! wrapper and kill scripts): returning when the command's own process exits,
//! trailers, tree kill on timeout and abort, the orphan sweep and record
//! cleanup. The same behaviours are tested against the cluster in
//! `__test__/exec.test.mjs`.

mod common;

use std::time::{Duration, Instant};

use common::{alive, local_engine, target, wait_gone, wait_until, HANG};
use sandbox_core::testing::ExecEngine;
use sandbox_core::{ErrorCode, ExecRequest};

fn request(command: &str, cwd: &str) -> ExecRequest {
    ExecRequest::new(command, cwd)
}

fn pids(stdout: &[u8]) -> Vec<u32> {
    String::from_utf8_lossy(stdout).split_whitespace().filter_map(|w| w.parse().ok()).collect()
}

#[tokio::test]
async fn exit_codes_and_streams() {
    let (engine, dir) = local_engine("codes");
    let cwd = dir.to_str().unwrap();
    for (command, code) in [("true", 0), ("false", 1), ("exit 7", 7), ("no-such-command-xyz", 127)] {
        let r = engine.exec(target(), request(command, cwd)).await.unwrap();
        assert_eq!(r.exit_code, Some(code), "{command}");
    }
    let r = engine.exec(target(), request("echo out; echo err >&2; printf tail", cwd)).await.unwrap();
    assert_eq!((r.stdout.as_slice(), r.stderr.as_slice()), (&b"out\ntail"[..], &b"err\n"[..]));
}

#[tokio::test]
async fn returns_when_the_command_exits_while_a_child_holds_the_pipes() {
    let (engine, dir) = local_engine("background");
    // The child never ends by itself: an exec that waited for the pipes to
    // close would hang (caught by the bound), not merely be slow.
    let r = tokio::time::timeout(
        HANG,
        engine.exec(target(), request("sleep 3600 & echo $!; echo started", dir.to_str().unwrap())),
    )
    .await
    .expect("the exec returned while the child still runs")
    .unwrap();
    assert_eq!(r.exit_code, Some(0));
    let out = String::from_utf8(r.stdout).unwrap();
    assert!(out.ends_with("started\n"), "{out:?}");
    let pid = pids(out.as_bytes())[0];
    assert!(alive(pid), "the background child keeps running");
    std::process::Command::new("kill").arg(pid.to_string()).status().unwrap();
    // Its pipes are still being drained: it can write without EPIPE. The
    // writer waits for the exec to have returned (`returned`), writes, then
    // touches a file; killed by EPIPE, it is gone without the file.
    let r = engine
        .exec(
            target(),
            request(
                "(while [ ! -e returned ]; do sleep 0.05; done; echo late; touch wrote-after) & echo $!",
                dir.to_str().unwrap(),
            ),
        )
        .await
        .unwrap();
    let writer = pids(&r.stdout)[0];
    std::fs::write(dir.join("returned"), "").unwrap();
    wait_gone(&[writer]).await;
    assert!(dir.join("wrote-after").exists(), "a child writing after the exec returned was killed by EPIPE");
}

#[tokio::test]
async fn output_that_looks_like_a_trailer_is_output() {
    let (engine, dir) = local_engine("fake-trailer");
    let r = engine
        .exec(target(), request(r"printf '\036asb 0.1 0\n\036asb'; printf '\036' >&2", dir.to_str().unwrap()))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.stdout, b"\x1easb 0.1 0\n\x1easb");
    assert_eq!(r.stderr, b"\x1e");
}

#[tokio::test]
async fn timeout_kills_the_tree_including_reparented_children() {
    let (engine, dir) = local_engine("timeout");
    let cwd = dir.to_str().unwrap();
    // A reparented sleeper, a plain one, and a subshell that would touch a
    // file if it outlived the kill (it sleeps long, so only a kill that
    // works ends it without the file). The timeout leaves the shell ample
    // time to start them all.
    let mut req =
        request("(sleep 300 & echo $!); sleep 300 & echo $!; (sleep 30; touch child-ran) & echo $!; sleep 100", cwd);
    req.timeout = Some(Duration::from_secs(1));
    let r = engine.exec(target(), req).await.unwrap();
    assert_eq!((r.exit_code, r.timed_out), (None, true));
    let found = pids(&r.stdout);
    assert_eq!(found.len(), 3, "{:?}", String::from_utf8_lossy(&r.stdout));
    // A survivor would keep this waiting until it ends by itself: the 300 s
    // sleepers past the bound, the subshell after writing its file.
    wait_gone(&found).await;
    assert!(!dir.join("child-ran").exists(), "the subshell survived the kill");
}

#[tokio::test]
async fn a_term_ignoring_command_is_killed_after_the_grace() {
    let (engine, dir) = local_engine("ignoreterm");
    // The child's `sleep` carries the run's marker and is found before the
    // subshell waiting for it: a KILL that reached the `sleep` while the
    // subshell still ran would let it run `touch`.
    let mut req =
        request("trap '' TERM; (trap '' TERM; sleep 60; touch child-ran) & echo $!; sleep 100", dir.to_str().unwrap());
    req.timeout = Some(Duration::from_secs(1));
    let t0 = Instant::now();
    let r = engine.exec(target(), req).await.unwrap();
    assert!(r.timed_out);
    // A lower bound: load only makes it longer.
    assert!(
        t0.elapsed() >= Duration::from_secs(3),
        "KILL came before the timeout and the 2 s grace: {:?}",
        t0.elapsed()
    );
    // The subshell's pid: once it is gone, it either ran `touch` or was killed.
    let subshell = pids(&r.stdout);
    assert_eq!(subshell.len(), 1, "{:?}", String::from_utf8_lossy(&r.stdout));
    wait_gone(&subshell).await;
    assert!(!dir.join("child-ran").exists(), "a shell of the tree ran on after its child was killed");
}

#[tokio::test]
async fn abort_kills_the_tree_and_fails_with_aborted() {
    let (engine, dir) = local_engine("abort");
    let mut req = request("(sleep 30; touch child-ran) & echo $!; sleep 100", dir.to_str().unwrap());
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    req.output = Some(tx);
    let cancel = req.cancel.clone();
    // Aborts once the child is running (its pid printed), not after a time.
    let child = tokio::spawn(async move {
        let mut out = Vec::new();
        while let Some(chunk) = rx.recv().await {
            out.extend_from_slice(&chunk.data);
            if out.ends_with(b"\n") {
                cancel.cancel();
                break;
            }
        }
        while rx.recv().await.is_some() {}
        pids(&out)
    });
    let e = engine.exec(target(), req).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Aborted);
    let child = child.await.unwrap();
    assert_eq!(child.len(), 1);
    // Gone either way: killed, or after its `touch`.
    wait_gone(&child).await;
    assert!(!dir.join("child-ran").exists(), "the child survived the abort");
}

#[tokio::test]
async fn a_missing_cwd_runs_nothing() {
    let (engine, dir) = local_engine("cwd");
    let missing = dir.join("missing");
    let e = engine.exec(target(), request("touch ran", missing.to_str().unwrap())).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    assert!(!dir.join("ran").exists() && !missing.exists());
}

#[tokio::test]
async fn stdin_reaches_eof_and_unread_stdin_does_not_hang() {
    let (engine, dir) = local_engine("stdin");
    let cwd = dir.to_str().unwrap();
    let mut req = request("cat; echo eof >&2", cwd);
    req.stdin = Some(bytes::Bytes::from_static(b"abc\0def"));
    let r = engine.exec(target(), req).await.unwrap();
    assert_eq!((r.stdout.as_slice(), r.stderr.as_slice()), (&b"abc\0def"[..], &b"eof\n"[..]));
    let mut req = request("echo done", cwd);
    req.stdin = Some(bytes::Bytes::from(vec![0u8; 1 << 20]));
    assert_eq!(engine.exec(target(), req).await.unwrap().stdout, b"done\n");
}

#[tokio::test]
async fn the_sweep_kills_what_another_engine_left_running_but_not_finished_runs_children() {
    let dir = common::scratch("sweep");
    let a = ExecEngine::with_runtime(Box::new(common::LocalRuntime::new(&dir)), 8);
    let cwd = dir.to_str().unwrap().to_owned();
    // A finished exec of A that left a child running on purpose.
    let r = a.exec(target(), request("sleep 60 & echo $!", &cwd)).await.unwrap();
    let leftover = pids(&r.stdout)[0];
    // A run of A still going when A "crashes" (its future is dropped).
    // Dropped once its command runs (not after a time).
    let running = a.exec(target(), request("sleep 300", &cwd));
    tokio::select! {
        r = running => panic!("sleep 300 ended: {r:?}"),
        () = wait_until("the run's sleep 300", || !sleepers(&dir).is_empty()) => {}
    }
    let before = std::fs::read_dir(dir.join("shm/.agent-sandbox/run")).unwrap().count();
    assert!(before >= 1);
    let crashed = sleepers(&dir);

    let b = ExecEngine::with_runtime(Box::new(common::LocalRuntime::new(&dir)), 8);
    b.sweep_orphans(target()).await.unwrap();
    // Signalled by the sweep, gone once scheduled; a survivor waits out the bound.
    wait_gone(&crashed).await;
    assert!(alive(leftover), "a finished run's background child was killed by the sweep");
    // Swept records are removed.
    let left: Vec<_> =
        std::fs::read_dir(dir.join("shm/.agent-sandbox/run")).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "records left: {left:?}");
    std::process::Command::new("kill").arg(leftover.to_string()).status().unwrap();
}

/// The `sleep 300` processes of runs in `dir` (their `TMPDIR`).
fn sleepers(dir: &std::path::Path) -> Vec<u32> {
    let sleepers = std::process::Command::new("pgrep").args(["-f", "^sleep 300$"]).output().unwrap();
    pids(&sleepers.stdout)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/environ"))
                .map(|e| String::from_utf8_lossy(&e).contains(&format!("TMPDIR={}\0", dir.display())))
                .unwrap_or(false)
        })
        .collect()
}

#[tokio::test]
async fn finished_records_are_cleaned_up_as_runs_go_on() {
    let (engine, dir) = local_engine("cleanup");
    let cwd = dir.to_str().unwrap();
    for _ in 0..300 {
        engine.exec(target(), request("true", cwd)).await.unwrap();
    }
    // The removal runs in the background of later runs: wait for it.
    let records = || std::fs::read_dir(dir.join("shm/.agent-sandbox/run")).unwrap().count();
    wait_until("fewer than 100 records left after 300 runs", || records() < 100).await;
}

#[tokio::test]
async fn a_killed_command_leaves_no_shell_job_report_in_stderr() {
    let (engine, dir) = local_engine("jobreport");
    for stdin in [None, Some(bytes::Bytes::from_static(b"x"))] {
        let mut req = request("echo started; sleep 100", dir.to_str().unwrap());
        req.timeout = Some(Duration::from_secs(1));
        req.stdin = stdin;
        let r = engine.exec(target(), req).await.unwrap();
        assert!(r.timed_out);
        assert_eq!((r.stdout.as_slice(), r.stderr.as_slice()), (&b"started\n"[..], &b""[..]));
    }
}

#[tokio::test]
async fn a_command_too_long_for_a_url_runs_like_a_short_one() {
    let (engine, dir) = local_engine("longcmd");
    // A 100 KB heredoc, as agents write files, with stdin after it.
    let body: String = (0..10_000).map(|i| format!("line {i:05}\n")).collect();
    let command = format!("cat > out.txt <<'EOF'\n{body}EOF\nwc -c < out.txt; cat");
    let mut req = request(&command, dir.to_str().unwrap());
    req.stdin = Some(bytes::Bytes::from_static(b"stdin after\n"));
    let r = engine.exec(target(), req).await.unwrap();
    assert_eq!(r.exit_code, Some(0), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(r.stdout, format!("{}\nstdin after\n", body.len()).into_bytes());
    assert_eq!(std::fs::read_to_string(dir.join("out.txt")).unwrap(), body);
    // Trailing newlines of the command are kept, and no stdin still means EOF.
    let command = format!("{}\nprintf ok; cat\n\n\n", "#".repeat(20_000));
    let r = engine.exec(target(), request(&command, dir.to_str().unwrap())).await.unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(0), &b"ok"[..]));
}

#[tokio::test]
async fn the_command_sees_what_sh_c_would_give_it() {
    let (engine, dir) = local_engine("semantics");
    let cwd = dir.to_str().unwrap();
    let run = |command: &str| {
        let mut req = request(command, cwd);
        req.env = vec![("MY_VAR".into(), "v".into())];
        engine.exec(target(), req)
    };
    // No arguments; none of the wrapper's variables, the secret included.
    let r = run(r#"echo "[$#][$1][$c$i$f$r$n$k$s][$MY_VAR]""#).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&r.stdout), "[0][][][v]\n");
    // exit, and the command's own EXIT trap, which then prints after it.
    let r = run("trap 'echo bye' EXIT; echo hi; exit 5").await.unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(5), &b"hi\nbye\n"[..]));
    let r = run("echo out; exit 3").await.unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(3), &b"out\n"[..]));
    // Redirecting its own stdout puts no trailer in the file.
    let r = run("exec >redirected.txt; echo x; echo y >&2").await.unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice(), r.stderr.as_slice()), (Some(0), &b""[..], &b"y\n"[..]));
    assert_eq!(std::fs::read(dir.join("redirected.txt")).unwrap(), b"x\n");
    // exec into another program; a PATH that finds nothing.
    assert_eq!(run("exec sh -c 'exit 4'").await.unwrap().exit_code, Some(4));
    let mut req = request("ls", cwd);
    req.env = vec![("PATH".into(), "/nonexistent".into())];
    assert_eq!(engine.exec(target(), req).await.unwrap().exit_code, Some(127));
    // Syntax errors are the shell's.
    let r = run("if").await.unwrap();
    assert_eq!(r.exit_code, Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("Syntax error"), "{}", String::from_utf8_lossy(&r.stderr));
}

#[tokio::test]
async fn a_killed_tree_of_shells_reports_no_killed_jobs() {
    // Background subshells waiting on their own children: each would print
    // "Terminated" if its child died before it did.
    let (engine, dir) = local_engine("quietkill");
    for _ in 0..5 {
        let mut req = request(
            "echo started; (sleep 30; echo a) & (sleep 30; echo b) & (sh -c 'sleep 30') & sleep 100",
            dir.to_str().unwrap(),
        );
        req.timeout = Some(Duration::from_secs(1));
        let r = engine.exec(target(), req).await.unwrap();
        assert!(r.timed_out);
        assert_eq!((r.stdout.as_slice(), String::from_utf8_lossy(&r.stderr).as_ref()), (&b"started\n"[..], ""));
    }
}

#[tokio::test]
async fn cwd_env_and_commands_arrive_byte_exact_on_stdin() {
    let (engine, dir) = local_engine("fields");
    let odd = dir.join("a\nb \\ c");
    std::fs::create_dir(&odd).unwrap();
    let values = ["", "\n", "\n\n", "  lead and trail  ", "back\\slash\\n", "tab\there\r\n", "ünï $(x) `y` 'z'"];
    let mut req = request(
        "for v in V0 V1 V2 V3 V4 V5 V6; do eval \"printf '%s|' \\\"\\$$v\\\"\"; done; pwd",
        odd.to_str().unwrap(),
    );
    req.env = values.iter().enumerate().map(|(i, v)| (format!("V{i}"), (*v).to_owned())).collect();
    let r = engine.exec(target(), req).await.unwrap();
    let expected = format!("{}|{}\n", values.join("|"), odd.to_str().unwrap());
    assert_eq!(String::from_utf8(r.stdout).unwrap(), expected);
    // Commands of every length, with and without final newlines.
    for command in
        ["printf x\n\n", &format!("printf '%s' {}", "y".repeat(3000)), &format!("# {}\nprintf z", "w".repeat(100_000))]
    {
        let r = engine.exec(target(), request(command, dir.to_str().unwrap())).await.unwrap();
        assert_eq!(r.exit_code, Some(0), "{}", &command[..20]);
        assert!(
            matches!(r.stdout.as_slice(), b"x" | b"z") || r.stdout.len() == 3000,
            "{:?}",
            String::from_utf8_lossy(&r.stdout[..r.stdout.len().min(40)])
        );
    }
}

#[tokio::test]
async fn every_env_name_a_caller_may_set_reaches_the_command_exactly() {
    let (engine, dir) = local_engine("envnames");
    let env = common::every_env_name();
    let mut req = request(&common::print_env_command(&env), dir.to_str().unwrap());
    req.env = env.clone();
    let r = engine.exec(target(), req).await.unwrap();
    assert_eq!((r.exit_code, String::from_utf8_lossy(&r.stderr).as_ref()), (Some(0), ""));
    assert_eq!(String::from_utf8_lossy(&r.stdout), String::from_utf8_lossy(&common::printed_env(&env)));
}
