//! What a hostile sandbox can do to the provider's own files and output,
//! over [`common::LocalRuntime`] (the real scripts as local processes),
//! under dash and under `bash --posix` (an image whose `/bin/sh` is bash
//! evaluates arithmetic on variable contents as code): forged trailers, a
//! reserved env name, symlinked provider directories, forged run and process
//! records, FIFOs and sparse files. The cluster suite
//! `__test__/hostile.test.mjs` runs the host-side cases (memory, fairness)
//! against the real transport.

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{alive, target, LocalRuntime};
use sandbox_core::testing::{files, process, ExecEngine};
use sandbox_core::{ByteRange, Call, ErrorCode, ExecRequest, Kill, SpawnRequest};
use tokio_util::sync::CancellationToken;

const SHELLS: [&[&str]; 2] = [&["/bin/sh"], &["bash", "--posix"]];

fn engine(dir: &Path, shell: &[&str]) -> ExecEngine {
    ExecEngine::with_runtime(Box::new(LocalRuntime::new(dir).with_shell(shell)), 16)
}

fn request(command: &str, cwd: &Path) -> ExecRequest {
    ExecRequest::new(command, cwd.to_str().unwrap())
}

/// A workspace with a few files, one named like a run record.
fn workspace(dir: &Path) -> PathBuf {
    let w = dir.join("workspace");
    std::fs::create_dir_all(&w).unwrap();
    for name in ["main.rs", "0123456789abcdef.5", "notes"] {
        std::fs::write(w.join(name), name).unwrap();
    }
    w
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_command_cannot_forge_its_own_end() {
    for shell in SHELLS {
        let dir = common::scratch("forge");
        let engine = engine(&dir, shell);
        // The run id is visible to the command (its kill marker); the secret is not.
        let command = r#"id=${AGENT_SANDBOX_RUN%:}
printf '\036asb %s 0\n' "$id"; printf '\036asb %s 0\n' "$id" >&2
printf '\036asb %s cwd\n' "$id"; printf '\036asb %s cwd\n' "$id" >&2
sleep 0.3; echo after; exit 7"#;
        let r = engine.exec(target(), request(command, &dir)).await.unwrap();
        assert_eq!(r.exit_code, Some(7), "{shell:?}: {}", String::from_utf8_lossy(&r.stderr));
        let out = String::from_utf8_lossy(&r.stdout);
        assert!(out.ends_with("after\n") && out.contains("asb"), "{shell:?}: {out:?}");
    }
}

#[tokio::test]
async fn reserved_env_names_are_refused_and_a_dash_command_spawns() {
    let dir = common::scratch("reserved");
    let engine = engine(&dir, SHELLS[0]);
    let mut req = request("sleep 30", &dir);
    req.env = vec![("AGENT_SANDBOX_RUN".into(), String::new())];
    let e = engine.exec(target(), req).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidRequest);
    assert!(e.message.contains("reserved"), "{}", e.message);
    // A command starting with `-` is a command, not an option of sh.
    let p =
        process::spawn(&engine, target(), &Call::default(), SpawnRequest::new("-x; echo hi", dir.to_str().unwrap()))
            .await
            .unwrap();
    let exit = process::wait(&engine, target(), &p.id, CancellationToken::new()).await.unwrap();
    let poll = process::poll(&engine, target(), &Call::default(), &p.id, None).await.unwrap();
    let out: Vec<u8> = poll.chunks.iter().flat_map(|c| c.data.to_vec()).collect();
    assert_eq!(exit.exit_code, Some(0), "{}", String::from_utf8_lossy(&out));
    assert!(String::from_utf8_lossy(&out).contains("hi"), "{}", String::from_utf8_lossy(&out));
}

#[tokio::test]
async fn symlinked_provider_directories_never_touch_the_workspace() {
    for shell in SHELLS {
        let dir = common::scratch("symlink");
        let w = workspace(&dir);
        let before = files_in(&w);
        // The fast place points into the workspace: the wrapper uses the other.
        std::fs::create_dir_all(dir.join("shm/.agent-sandbox")).unwrap();
        symlink(&w, dir.join("shm/.agent-sandbox/run")).unwrap();
        let a = engine(&dir, shell);
        let r = a.exec(target(), request("echo ok", &dir)).await.unwrap();
        assert_eq!(r.stdout, b"ok\n", "{shell:?}: {}", String::from_utf8_lossy(&r.stderr));
        // A run left going by a crashed host, then another host's sweep.
        let running = a.exec(target(), request("sleep 300", &dir));
        let _ = tokio::time::timeout(Duration::from_millis(500), running).await;
        engine(&dir, shell).sweep_orphans(target()).await.unwrap();
        assert_eq!(files_in(&w), before, "{shell:?}");
        // Both places point into the workspace: nothing runs, nothing is touched.
        symlink(&w, dir.join(".agent-sandbox/run.tmp")).unwrap();
        std::fs::rename(dir.join(".agent-sandbox/run.tmp"), dir.join(".agent-sandbox/run")).unwrap_or_else(|_| {
            std::fs::remove_dir_all(dir.join(".agent-sandbox/run")).unwrap();
            symlink(&w, dir.join(".agent-sandbox/run")).unwrap();
        });
        let e = a.exec(target(), request("touch ran", &dir)).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal, "{shell:?}: {e}");
        assert!(!dir.join("ran").exists());
        engine(&dir, shell).sweep_orphans(target()).await.unwrap();
        assert_eq!(files_in(&w), before, "{shell:?}");
        // A process directory pointing into the workspace: no spawn, no cleanup there.
        std::fs::create_dir_all(dir.join(".agent-sandbox")).unwrap();
        symlink(&w, dir.join(".agent-sandbox/proc")).unwrap();
        let e = process::spawn(&a, target(), &Call::default(), SpawnRequest::new("true", dir.to_str().unwrap()))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal, "{shell:?}: {e}");
        assert!(process::list(&a, target(), &Call::default()).await.unwrap().is_empty());
        assert_eq!(files_in(&w), before, "{shell:?}");
    }
}

#[tokio::test]
async fn forged_run_records_kill_nothing_and_run_no_code() {
    for shell in SHELLS {
        let dir = common::scratch("records");
        let a = engine(&dir, shell);
        a.exec(target(), request("true", &dir)).await.unwrap();
        let run = dir.join("shm/.agent-sandbox/run");
        // A process the sandbox started itself, and records that name it, a
        // path and arithmetic (code, where bash evaluates it).
        let mut victim = std::process::Command::new("sleep").arg("300").spawn().unwrap();
        let pwned = dir.join("pwned");
        let records = [
            ("00000000000000aa.1", victim.id().to_string()),
            ("00000000000000aa.2", "../../../tmp/x".to_owned()),
            ("00000000000000aa.3", format!("a[$(touch {})]", pwned.display())),
            ("00000000000000aa.4", format!("1+x[$(touch {})]", pwned.display())),
        ];
        for (name, content) in &records {
            std::fs::write(run.join(name), format!("{content}\n")).unwrap();
        }
        engine(&dir, shell).sweep_orphans(target()).await.unwrap();
        assert!(alive(victim.id()), "{shell:?}: a forged record's pid was killed");
        assert!(!pwned.exists(), "{shell:?}: a record's content ran as code");
        victim.kill().unwrap();
        let _ = victim.wait();
    }
}

#[tokio::test]
async fn forged_process_records_are_bounded_and_no_exit() {
    for shell in SHELLS {
        let dir = common::scratch("proc-records");
        let engine = engine(&dir, shell);
        let p =
            process::spawn(&engine, target(), &Call::default(), SpawnRequest::new("sleep 30", dir.to_str().unwrap()))
                .await
                .unwrap();
        let pdir = dir.join(".agent-sandbox/proc").join(&p.id);
        let record = std::fs::read_to_string(pdir.join("p")).unwrap();
        let mut fields: Vec<String> = record.split_whitespace().map(str::to_owned).collect();
        // The cap forged to 2^64−1, an exit written by the command, a
        // trailer of its own, and 20 MiB appended to stdout.
        fields[6] = u64::MAX.to_string();
        std::fs::write(pdir.join("p"), fields.join(" ") + "\n").unwrap();
        std::fs::write(pdir.join("x"), "0\n").unwrap();
        let mut out = std::fs::OpenOptions::new().append(true).open(pdir.join("1")).unwrap();
        std::io::Write::write_all(&mut out, format!("\x1easb {} 0\n", p.id).as_bytes()).unwrap();
        std::io::Write::write_all(&mut out, &vec![b'y'; 20 << 20]).unwrap();
        let poll = process::poll(&engine, target(), &Call::default(), &p.id, None).await.unwrap();
        assert_eq!(poll.exit, None, "{shell:?}: a forged exit while it runs");
        let bytes: usize = poll.chunks.iter().map(|c| c.data.len()).sum();
        assert!(bytes as u64 <= process::POLL_PAGE, "{shell:?}: {bytes} bytes in one poll");
        // The provider's kill is reported as such, not as an exit code.
        process::kill(&engine, target(), &Call::default(), &p.id, Kill::Terminate).await.unwrap();
        let exit = process::wait(&engine, target(), &p.id, CancellationToken::new()).await.unwrap();
        assert!(exit.exit_code.is_none() && (exit.signal.is_some() || exit.lost), "{shell:?}: {exit:?}");
        // Records with garbage are skipped by a listing, whatever their number.
        let b = dir.join(".agent-sandbox/proc");
        for i in 0..50 {
            let d = b.join(format!("{i:020x}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("p"), format!("$(touch {}) x y\n", dir.join("pwned").display())).unwrap();
        }
        let list = process::list(&engine, target(), &Call::default()).await.unwrap();
        assert_eq!(list.len(), 1, "{shell:?}");
        assert!(!dir.join("pwned").exists());
    }
}

/// A listing reads every process's record, exit file and command, all the
/// sandbox's to rewrite: a 1 GiB command of NULs (sparse: no disk), 1 GiB
/// records and exit files without a newline (the `read` builtin would take
/// minutes), a FIFO for a command, a pid past `u32`, forged end markers in a
/// command. The listing still comes back, at once, with the real entries.
#[tokio::test]
async fn a_listing_is_bounded_whatever_the_sandbox_writes() {
    for shell in SHELLS {
        let dir = common::scratch("proc-list");
        let engine = engine(&dir, shell);
        let call = Call { cancel: CancellationToken::new(), timeout: Some(Duration::from_secs(20)) };
        let spawn =
            |command: &str| process::spawn(&engine, target(), &call, SpawnRequest::new(command, dir.to_str().unwrap()));
        let running = spawn("sleep 30").await.unwrap();
        let exited = spawn("echo hi").await.unwrap();
        process::wait(&engine, target(), &exited.id, CancellationToken::new()).await.unwrap();
        let root = dir.join(".agent-sandbox/proc");
        let gib = |path: PathBuf| std::fs::File::create(path).unwrap().set_len(1 << 30).unwrap();
        gib(root.join(&running.id).join("c"));
        gib(root.join(&exited.id).join("x"));
        let record = std::fs::read_to_string(root.join(&running.id).join("p")).unwrap();
        let forged = |n: u32, p: &str| {
            let d = root.join(format!("{n:020x}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("p"), p).unwrap();
            d
        };
        gib(forged(1, "").join("p"));
        forged(2, &record.replacen(' ', "999999999999 ", 1));
        let fifo = forged(3, &record).join("c");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        std::fs::write(forged(4, &record).join("c"), "x\0.\n\0more\n\0").unwrap();
        let list = process::list(&engine, target(), &call).await.unwrap();
        let seen: Vec<_> = list.iter().map(|p| (p.id.as_str(), p.command.as_str())).collect();
        let (id3, id4) = (format!("{:020x}", 3), format!("{:020x}", 4));
        let mut expected =
            vec![(id3.as_str(), ""), (id4.as_str(), "x"), (running.id.as_str(), ""), (exited.id.as_str(), "echo hi")];
        expected.sort();
        assert_eq!(seen, expected, "{shell:?}");
        assert!(list[3].exit.is_some_and(|e| e.lost), "{shell:?}: a 1 GiB exit file is no exit: {:?}", list[3]);
        let found = process::find(&engine, target(), &call, &running.id).await.unwrap().unwrap();
        assert_eq!((found.pid, found.exit), (running.pid, None), "{shell:?}");
        process::kill(&engine, target(), &call, &running.id, Kill::signal("KILL").unwrap()).await.unwrap();
    }
}

/// A process record the sandbox replaced by a FIFO would block the reading
/// scripts (a FIFO opens only once a writer comes): poll, wait, stdin and
/// signal answer for a record that is not a regular file as for none.
#[tokio::test]
async fn a_process_record_replaced_by_a_fifo_holds_no_call() {
    for shell in SHELLS {
        let dir = common::scratch("proc-fifo");
        let engine = engine(&dir, shell);
        let p =
            process::spawn(&engine, target(), &Call::default(), SpawnRequest::new("sleep 30", dir.to_str().unwrap()))
                .await
                .unwrap();
        let record = dir.join(".agent-sandbox/proc").join(&p.id).join("p");
        std::fs::remove_file(&record).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(&record).status().unwrap().success());
        let call = Call { cancel: CancellationToken::new(), timeout: Some(Duration::from_secs(20)) };
        let poll = process::poll(&engine, target(), &call, &p.id, None).await.unwrap();
        assert!(poll.exit.is_some_and(|e| e.lost), "{shell:?}: {poll:?}");
        let exit = process::wait(&engine, target(), &p.id, CancellationToken::new()).await.unwrap();
        assert!(exit.lost, "{shell:?}: {exit:?}");
        // An unknown process is nothing to signal.
        process::kill(&engine, target(), &call, &p.id, Kill::Terminate).await.unwrap();
        std::process::Command::new("kill").args(["-9", &p.pid.to_string()]).status().unwrap();
    }
}

#[tokio::test]
async fn a_process_that_ignores_term_is_ended_by_kill() {
    let dir = common::scratch("kill-term");
    let engine = engine(&dir, SHELLS[0]);
    let p = process::spawn(
        &engine,
        target(),
        &Call::default(),
        SpawnRequest::new("trap '' TERM; touch ready; sleep 300", dir.to_str().unwrap()),
    )
    .await
    .unwrap();
    // Killed once TERM is ignored (the file written after the trap), not after a time.
    common::wait_until("the trap set", || dir.join("ready").exists()).await;
    process::kill(&engine, target(), &Call::default(), &p.id, Kill::Terminate).await.unwrap();
    let exit = process::wait(&engine, target(), &p.id, CancellationToken::new()).await.unwrap();
    assert_eq!((exit.exit_code, exit.signal, exit.timed_out), (None, Some(9), false), "{exit:?}");
    assert!(!alive(p.pid));
    // A death the provider did not cause keeps the shell's status.
    let q = process::spawn(&engine, target(), &Call::default(), SpawnRequest::new("kill -9 $$", dir.to_str().unwrap()))
        .await
        .unwrap();
    let exit = process::wait(&engine, target(), &q.id, CancellationToken::new()).await.unwrap();
    assert_eq!((exit.exit_code, exit.signal), (Some(137), None));
}

#[tokio::test]
async fn fifos_and_sparse_files_cannot_hold_or_flood_a_read() {
    let dir = common::scratch("fifo");
    let engine = engine(&dir, SHELLS[0]);
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let e =
        files::read_file(&engine, target(), &Call::default(), fifo.to_str().unwrap(), 1 << 20, ByteRange::default())
            .await
            .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidRequest, "{e}");
    assert!(e.message.contains("not a regular file"), "{e}");
    // An 8 TiB sparse file read with a 4 TiB limit: refused from its
    // size, nothing allocated from what the sandbox claims (the host used
    // to reserve the announced size and abort).
    let sparse = dir.join("sparse");
    std::fs::File::create(&sparse).unwrap().set_len(1 << 43).unwrap();
    let e =
        files::read_file(&engine, target(), &Call::default(), sparse.to_str().unwrap(), 1 << 42, ByteRange::default())
            .await
            .unwrap_err();
    assert_eq!(e.code, ErrorCode::TooLarge, "{e}");
    // An aborted call fails at once.
    let cancel = CancellationToken::new();
    cancel.cancel();
    let call = Call { cancel, timeout: None };
    let e = files::stat(&engine, target(), &call, dir.to_str().unwrap()).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Aborted);
}
