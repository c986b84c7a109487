//! Spawned processes over [`common::LocalRuntime`] (local processes, the
//! real scripts): following and resuming by sequence, waiting after the fact,
//! stdin, kill of the whole tree, the output cap, listing from a new engine,
//! the in-sandbox timeout, a lost waiter, and `exec` reattached across cut
//! connections. The cluster suite `__test__/process.test.mjs` tests the same
//! against the real transport.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{alive, cuttable_engine, local_engine, target};
use sandbox_core::testing::{process, ExecEngine};
use sandbox_core::{Call, ErrorCode, ExecRequest, Kill, ProcessChunk, ProcessExit, SpawnRequest, SpawnStdin, Stream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn spawn_req(command: &str, dir: &std::path::Path) -> SpawnRequest {
    SpawnRequest::new(command, dir.to_str().unwrap())
}

/// Follows to the end; returns (stdout, stderr, chunks).
async fn follow_all(
    engine: &ExecEngine,
    id: &str,
    after: Option<u64>,
) -> (String, String, Vec<ProcessChunk>, ProcessExit) {
    let (tx, mut rx) = mpsc::channel(16);
    let collect = async {
        let mut chunks = Vec::new();
        while let Some(c) = rx.recv().await {
            chunks.push(c);
        }
        chunks
    };
    let (followed, chunks) =
        tokio::join!(process::follow(engine, target(), id, after, Some(tx), CancellationToken::new()), collect);
    let text = |s: Stream| {
        chunks
            .iter()
            .filter(|c| c.stream == s)
            .map(|c| String::from_utf8_lossy(&c.data).into_owned())
            .collect::<String>()
    };
    (text(Stream::Stdout), text(Stream::Stderr), chunks.clone(), followed.unwrap().exit)
}

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

#[tokio::test]
async fn spawn_returns_at_once_and_follow_gets_everything_in_order() {
    let (engine, dir) = local_engine("p-follow");
    // The command waits for a file the test writes after spawn returned: a
    // spawn that waited for the command would hang (caught by the bound).
    let p = tokio::time::timeout(
        common::HANG,
        process::spawn(
            &engine,
            target(),
            &Call::default(),
            spawn_req(
                "while [ ! -e go ]; do sleep 0.05; done; for i in $(seq 1 20); do echo $i; echo e$i >&2; sleep 0.05; done; exit 3",
                &dir,
            ),
        ),
    )
    .await
    .expect("spawn returned while the command runs")
    .unwrap();
    assert!(p.pid > 1 && p.exit.is_none());
    std::fs::write(dir.join("go"), "").unwrap();
    let (out, err, chunks, exit) = follow_all(&engine, &p.id, None).await;
    assert_eq!(out, numbered(20));
    assert_eq!(err, (1..=20).map(|i| format!("e{i}\n")).collect::<String>());
    assert_eq!((exit.exit_code, exit.timed_out, exit.lost), (Some(3), false, false));
    assert!(chunks.windows(2).all(|w| w[0].sequence < w[1].sequence));
}

#[tokio::test]
async fn a_reader_resuming_from_its_last_sequence_gets_the_rest_exactly_once() {
    let (engine, dir) = local_engine("p-resume");
    let p = process::spawn(
        &engine,
        target(),
        &Call::default(),
        spawn_req("for i in $(seq 1 40); do echo $i; echo e$i >&2; sleep 0.05; done", &dir),
    )
    .await
    .unwrap();
    // Reader A stops after a few chunks.
    let (tx, mut rx) = mpsc::channel(16);
    let cancel = CancellationToken::new();
    let a = process::follow(&engine, target(), &p.id, None, Some(tx), cancel.clone());
    let take = async {
        let mut got = Vec::new();
        while let Some(c) = rx.recv().await {
            got.push(c);
            if got.len() == 7 {
                cancel.cancel();
            }
        }
        got
    };
    let (a, first) = tokio::join!(a, take);
    assert_eq!(a.unwrap_err().code, ErrorCode::Aborted);
    let last = first.iter().take(7).last().unwrap().sequence;
    // Reader B, on another engine (another host process), from A's last sequence.
    let other = ExecEngine::with_runtime(Box::new(common::LocalRuntime::new(&dir)), 8);
    let (out, err, _, exit) = follow_all(&other, &p.id, Some(last)).await;
    let text = |s: Stream| {
        first
            .iter()
            .take(7)
            .filter(|c| c.stream == s)
            .map(|c| String::from_utf8_lossy(&c.data).into_owned())
            .collect::<String>()
    };
    assert_eq!(text(Stream::Stdout) + &out, numbered(40));
    assert_eq!(text(Stream::Stderr) + &err, (1..=40).map(|i| format!("e{i}\n")).collect::<String>());
    assert_eq!(exit.exit_code, Some(0));
    // A poll from the same point agrees.
    let poll = process::poll(&engine, target(), &Call::default(), &p.id, Some(last)).await.unwrap();
    let polled: String = poll
        .chunks
        .iter()
        .filter(|c| c.stream == Stream::Stdout)
        .map(|c| String::from_utf8_lossy(&c.data).into_owned())
        .collect();
    assert_eq!(polled, out);
    assert_eq!(poll.exit.unwrap().exit_code, Some(0));
}

#[tokio::test]
async fn wait_after_the_process_exited_while_nobody_was_connected() {
    let (engine, dir) = local_engine("p-wait");
    let p = process::spawn(&engine, target(), &Call::default(), spawn_req("echo hi; exit 5", &dir)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let exit = process::wait(&engine, target(), &p.id, CancellationToken::new()).await.unwrap();
    assert_eq!(exit.exit_code, Some(5));
    let poll = process::poll(&engine, target(), &Call::default(), &p.id, None).await.unwrap();
    assert_eq!(poll.chunks.iter().map(|c| c.data.clone()).collect::<Vec<_>>(), vec![Bytes::from_static(b"hi\n")]);
    assert_eq!(poll.exit.unwrap().exit_code, Some(5));
}

#[tokio::test]
async fn kill_reaches_grandchildren_whose_parent_died() {
    let (engine, dir) = local_engine("p-kill");
    let p = process::spawn(
        &engine,
        target(),
        &Call::default(),
        spawn_req(
            "(sleep 30; touch marker) & echo $! >pid1; (sh -c 'echo $$ >pid2.tmp; mv pid2.tmp pid2; sleep 30; touch marker2' &); sleep 100",
            &dir,
        ),
    )
    .await
    .unwrap();
    // Killed once both children run (their pids written), not after a time.
    common::wait_until("both children started", || dir.join("pid1").exists() && dir.join("pid2").exists()).await;
    let children: Vec<u32> = ["pid1", "pid2"]
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap().trim().parse().unwrap())
        .collect();
    process::kill(&engine, target(), &Call::default(), &p.id, Kill::signal("TERM").unwrap()).await.unwrap();
    let exit = process::wait(&engine, target(), &p.id, CancellationToken::new()).await.unwrap();
    // A death the provider caused: no exit code, the signal instead.
    assert_eq!((exit.exit_code, exit.signal), (None, Some(15)));
    // Gone either way: killed, or after their `touch`.
    common::wait_gone(&children).await;
    assert!(!dir.join("marker").exists() && !dir.join("marker2").exists(), "a grandchild survived the kill");
    assert!(!alive(p.pid));
    let e = Kill::signal("NOPE").unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidRequest);
}

#[tokio::test]
async fn stdin_written_later_reaches_the_process_and_close_gives_eof() {
    let (engine, dir) = local_engine("p-stdin");
    let mut req = spawn_req("cat; echo eof", &dir);
    req.stdin = SpawnStdin::Open;
    let p = process::spawn(&engine, target(), &Call::default(), req).await.unwrap();
    process::write_stdin(&engine, target(), &Call::default(), &p.id, Bytes::from_static(b"one\n")).await.unwrap();
    process::write_stdin(&engine, target(), &Call::default(), &p.id, Bytes::from_static(b"two\0\n")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        process::poll(&engine, target(), &Call::default(), &p.id, None).await.unwrap().exit.is_none(),
        "cat still waits for more"
    );
    process::close_stdin(&engine, target(), &Call::default(), &p.id).await.unwrap();
    let (out, _, _, exit) = follow_all(&engine, &p.id, None).await;
    assert_eq!((out.as_str(), exit.exit_code), ("one\ntwo\0\neof\n", Some(0)));
    let e =
        process::write_stdin(&engine, target(), &Call::default(), &p.id, Bytes::from_static(b"x")).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    // Without `stdin: open`.
    let q = process::spawn(&engine, target(), &Call::default(), spawn_req("true", &dir)).await.unwrap();
    let e =
        process::write_stdin(&engine, target(), &Call::default(), &q.id, Bytes::from_static(b"x")).await.unwrap_err();
    assert!(e.code == ErrorCode::InvalidState && e.message.contains("stdin: true"), "{e}");
    // Bytes given at spawn, then EOF.
    let mut req = spawn_req("wc -c", &dir);
    req.stdin = SpawnStdin::Bytes(Bytes::from(vec![7u8; 100_000]));
    let r = process::spawn(&engine, target(), &Call::default(), req).await.unwrap();
    let (out, _, _, _) = follow_all(&engine, &r.id, None).await;
    assert_eq!(out.trim(), "100000");
}

#[tokio::test]
async fn output_past_the_cap_is_dropped_and_reported() {
    let (engine, dir) = local_engine("p-cap");
    let mut req = spawn_req("head -c 100000 /dev/zero | tr '\\0' x; echo done >&2", &dir);
    req.max_output_bytes = 1000;
    let p = process::spawn(&engine, target(), &Call::default(), req).await.unwrap();
    let (out, err, _, exit) = follow_all(&engine, &p.id, None).await;
    assert_eq!((out.len(), err.as_str(), exit.exit_code), (1000, "done\n", Some(0)));
    let poll = process::poll(&engine, target(), &Call::default(), &p.id, None).await.unwrap();
    assert!(poll.truncated);
    assert_eq!(poll.chunks.iter().filter(|c| c.stream == Stream::Stdout).map(|c| c.data.len()).sum::<usize>(), 1000);
    let mut req = spawn_req("true", &dir);
    req.max_output_bytes = process::MAX_CAP + 1;
    assert_eq!(
        process::spawn(&engine, target(), &Call::default(), req).await.unwrap_err().code,
        ErrorCode::InvalidRequest
    );
}

#[tokio::test]
async fn processes_are_listed_from_a_new_engine_and_found_by_id() {
    let (engine, dir) = local_engine("p-list");
    let a = process::spawn(&engine, target(), &Call::default(), spawn_req("sleep 30", &dir)).await.unwrap();
    let b = process::spawn(&engine, target(), &Call::default(), spawn_req("printf 'multi\\nline'; exit 4", &dir))
        .await
        .unwrap();
    process::wait(&engine, target(), &b.id, CancellationToken::new()).await.unwrap();
    let other = ExecEngine::with_runtime(Box::new(common::LocalRuntime::new(&dir)), 8);
    let list = process::list(&other, target(), &Call::default()).await.unwrap();
    assert_eq!(list.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), [a.id.as_str(), b.id.as_str()]);
    assert_eq!((list[0].command.as_str(), list[0].exit), ("sleep 30", None));
    assert_eq!((list[1].command.as_str(), list[1].exit.unwrap().exit_code), ("printf 'multi\\nline'; exit 4", Some(4)));
    assert_eq!(process::find(&other, target(), &Call::default(), &a.id).await.unwrap().unwrap().pid, a.pid);
    assert_eq!(process::find(&other, target(), &Call::default(), "00000000000000000000").await.unwrap(), None);
    assert_eq!(process::find(&other, target(), &Call::default(), "../x").await.unwrap(), None);
    process::kill(&engine, target(), &Call::default(), &a.id, Kill::signal("KILL").unwrap()).await.unwrap();
}

#[tokio::test]
async fn the_timeout_is_enforced_in_the_sandbox() {
    let (engine, dir) = local_engine("p-timeout");
    let mut req = spawn_req("echo started; trap '' TERM; sleep 100", &dir);
    req.timeout = Some(Duration::from_secs(1));
    let p = process::spawn(&engine, target(), &Call::default(), req).await.unwrap();
    let t0 = Instant::now();
    let exit = process::wait(&engine, target(), &p.id, CancellationToken::new()).await.unwrap();
    assert_eq!((exit.exit_code, exit.timed_out), (None, true));
    assert!(t0.elapsed() >= Duration::from_secs(2), "KILL before the grace");
    let (out, _, _, _) = follow_all(&engine, &p.id, None).await;
    assert_eq!(out, "started\n");
}

/// The timer's tree kill outlives the command: a command that dies of the
/// TERM ends its waiter's wait, and the waiter's ending the timer must not
/// cut the grace short and skip the KILL of a child that ignores TERM.
#[tokio::test]
async fn the_timeout_kills_a_term_ignoring_child_of_a_command_that_dies_of_term() {
    let (engine, dir) = local_engine("p-timeout-child");
    let mut req = spawn_req("(trap '' TERM; exec sleep 100) & echo $! >child; wait", &dir);
    req.timeout = Some(Duration::from_millis(300));
    let p = process::spawn(&engine, target(), &Call::default(), req).await.unwrap();
    let exit = process::wait(&engine, target(), &p.id, CancellationToken::new()).await.unwrap();
    assert!(exit.timed_out);
    let child: u32 = std::fs::read_to_string(dir.join("child")).unwrap().trim().parse().unwrap();
    // KILL comes after the 2 s grace: give it ample time, then look.
    for _ in 0..200 {
        if !alive(child) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let survived = alive(child);
    if survived {
        std::process::Command::new("kill").args(["-9", &child.to_string()]).status().unwrap();
    }
    assert!(!survived, "the child that ignores TERM outlived the timeout");
}

#[tokio::test]
async fn a_process_whose_waiter_died_is_lost() {
    let (engine, dir) = local_engine("p-lost");
    let p = process::spawn(&engine, target(), &Call::default(), spawn_req("sleep 100", &dir)).await.unwrap();
    let meta = std::fs::read_to_string(dir.join(format!(".agent-sandbox/proc/{}/p", p.id))).unwrap();
    let waiter = meta.split(' ').nth(1).unwrap().to_owned();
    std::process::Command::new("kill").args(["-9", &waiter]).status().unwrap();
    let exit = process::wait(&engine, target(), &p.id, CancellationToken::new()).await.unwrap();
    assert!(exit.lost && exit.exit_code.is_none());
    process::kill(&engine, target(), &Call::default(), &p.id, Kill::signal("KILL").unwrap()).await.unwrap();
    // A process whose files are gone (its pod was replaced) is lost too.
    std::fs::remove_dir_all(dir.join(format!(".agent-sandbox/proc/{}", p.id))).unwrap();
    assert!(process::poll(&engine, target(), &Call::default(), &p.id, None).await.unwrap().exit.unwrap().lost);
}

#[tokio::test]
async fn the_orphan_sweep_leaves_spawned_processes_alone() {
    let (engine, dir) = local_engine("p-sweep");
    let p = process::spawn(&engine, target(), &Call::default(), spawn_req("sleep 30", &dir)).await.unwrap();
    let other = ExecEngine::with_runtime(Box::new(common::LocalRuntime::new(&dir)), 8);
    other.sweep_orphans(target()).await.unwrap();
    assert!(alive(p.pid));
    process::kill(&engine, target(), &Call::default(), &p.id, Kill::signal("KILL").unwrap()).await.unwrap();
}

#[tokio::test]
async fn exec_reattached_survives_cut_connections_with_exact_output() {
    let (engine, dir, cut) = cuttable_engine("p-reattach");
    let command = "for i in $(seq 1 30); do echo $i; echo e$i >&2; sleep 0.05; done; exit 2";
    let plain = engine.exec(target(), ExecRequest::new(command, dir.to_str().unwrap())).await.unwrap();
    cut.store(3, std::sync::atomic::Ordering::SeqCst);
    let (tx, mut rx) = mpsc::channel(16);
    let mut req = ExecRequest::new(command, dir.to_str().unwrap());
    req.output = Some(tx);
    let collect = async {
        let mut n = 0;
        while let Some(c) = rx.recv().await {
            n += c.data.len();
        }
        n
    };
    let (r, streamed) = tokio::join!(process::exec_reattached(&engine, target(), req), collect);
    let r = r.unwrap();
    assert_eq!(cut.load(std::sync::atomic::Ordering::SeqCst), 0, "the connections were cut");
    assert_eq!(r, plain);
    assert_eq!(streamed, plain.stdout.len() + plain.stderr.len());
    // Timeout and abort behave as a plain exec's.
    let mut req = ExecRequest::new("echo a; sleep 100", dir.to_str().unwrap());
    req.timeout = Some(Duration::from_secs(1));
    let r = process::exec_reattached(&engine, target(), req).await.unwrap();
    assert_eq!((r.exit_code, r.timed_out, r.stdout.as_slice()), (None, true, &b"a\n"[..]));
    // The abort resolves once the tree is killed (however slow the machine):
    // then no `sleep` of it is left and nothing ran after it.
    let req = ExecRequest::new("sleep 30.4217; touch ran", dir.to_str().unwrap());
    let cancel = req.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    assert_eq!(process::exec_reattached(&engine, target(), req).await.unwrap_err().code, ErrorCode::Aborted);
    assert_eq!(argv_with("sleep 30.4217"), Vec::<String>::new(), "the command's tree is gone");
    assert!(!dir.join("ran").exists());
}

#[tokio::test]
async fn a_long_command_can_be_spawned_and_listed() {
    let (engine, dir) = local_engine("p-long");
    let command = format!("# {}\necho long; cat", "x".repeat(50_000));
    let mut req = spawn_req(&command, &dir);
    req.stdin = SpawnStdin::Bytes(Bytes::from_static(b"in\n"));
    let p = process::spawn(&engine, target(), &Call::default(), req).await.unwrap();
    let (out, _, _, exit) = follow_all(&engine, &p.id, None).await;
    assert_eq!((out.as_str(), exit.exit_code), ("long\nin\n", Some(0)));
    // A listing shows the first 16 KiB of a command.
    let listed = process::find(&engine, target(), &Call::default(), &p.id).await.unwrap().unwrap().command;
    assert_eq!(listed, command[..16 * 1024]);
}

#[tokio::test]
async fn polling_in_a_loop_costs_a_few_execs_not_one_each() {
    let dir = common::scratch("p-pollloop");
    let runtime = common::LocalRuntime::new(&dir);
    let runs = runtime.runs();
    let engine = ExecEngine::with_runtime(Box::new(runtime), 16);
    let sandbox =
        sandbox_core::testing::sandbox(engine, target().clone(), dir.to_str().unwrap().to_owned(), Default::default());
    let p = sandbox
        .spawn(spawn_req("for i in $(seq 1 30); do echo $i; sleep 0.1; done; exit 3", &dir), Call::default())
        .await
        .unwrap();
    let before = runs.load(std::sync::atomic::Ordering::SeqCst);
    // The adapter's runRemoteProcess: poll every 100 ms until the exit.
    let (mut after, mut out, mut polls) = (None, String::new(), 0);
    let exit = loop {
        let poll = sandbox.poll_process(&p.id, after, Call::default()).await.unwrap();
        polls += 1;
        for c in &poll.chunks {
            assert!(after.is_none_or(|a| c.sequence > a), "chunks in order, each once");
            after = Some(c.sequence);
            out.push_str(&String::from_utf8_lossy(&c.data));
        }
        if let Some(exit) = poll.exit {
            break exit;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let execs = runs.load(std::sync::atomic::Ordering::SeqCst) - before;
    assert_eq!(exit.exit_code, Some(3));
    assert_eq!(out, (1..=30).map(|i| format!("{i}\n")).collect::<String>());
    assert!(polls >= 20, "{polls} polls");
    assert!(execs <= 5, "{execs} execs for {polls} polls");
}

/// Every process's argv (`/proc/*/cmdline`, readable by every uid) that
/// contains `needle`.
fn argv_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(argv) = std::fs::read(entry.path().join("cmdline")) {
            let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
            if argv.contains(needle) {
                found.push(argv);
            }
        }
    }
    found
}

#[tokio::test]
async fn commands_cwds_and_env_values_are_in_no_argv() {
    let (engine, dir) = local_engine("p-argv");
    let sub = dir.join("cwd-marker-3c41");
    std::fs::create_dir(&sub).unwrap();
    let env = vec![("TOKEN".to_owned(), "value-marker-9e2f\nline 2".to_owned())];
    // The command's own program (`sleep`) has its own argv; the markers are in
    // what the scripts get: the comment, the cwd and the env value.
    let mut exec = ExecRequest::new("test \"$TOKEN\" = \"$(printf 'value-marker-9e2f\\nline 2')\" && touch started && sleep 3 # command-marker-51b0", sub.to_str().unwrap());
    exec.env = env.clone();
    let mut spawn = spawn_req("sleep 3 # command-marker-51b0", &sub);
    spawn.env = env;
    let p = process::spawn(&engine, target(), &Call::default(), spawn).await.unwrap();
    let running = tokio::spawn({
        let engine = engine.clone();
        async move { engine.exec(target(), exec).await }
    });
    while !sub.join("started").exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for needle in ["command-marker-51b0", "cwd-marker-3c41", "value-marker-9e2f"] {
        assert_eq!(argv_with(needle), Vec::<String>::new(), "{needle}");
    }
    assert_eq!(running.await.unwrap().unwrap().exit_code, Some(0), "the env value arrived exactly");
    let exit = process::wait(&engine, target(), &p.id, CancellationToken::new()).await.unwrap();
    assert_eq!(exit.exit_code, Some(0));
}

#[tokio::test]
async fn every_env_name_a_caller_may_set_reaches_the_spawned_command_exactly() {
    let (engine, dir) = local_engine("p-envnames");
    let env = common::every_env_name();
    let mut req = spawn_req(&common::print_env_command(&env), &dir);
    req.env = env.clone();
    let p = process::spawn(&engine, target(), &Call::default(), req).await.unwrap();
    let (stdout, stderr, _, exit) = follow_all(&engine, &p.id, None).await;
    assert_eq!((exit.exit_code, stderr.as_str()), (Some(0), ""));
    assert_eq!(stdout, String::from_utf8_lossy(&common::printed_env(&env)));
}
