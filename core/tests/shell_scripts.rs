//! Every in-pod script, as composed from its sources (`core/src/*/sh/`) and
//! as the engine sends it (minified), is valid POSIX sh for dash and for
//! bash --posix (`-n`), and passes `shellcheck -s sh` at warning level. The
//! checks a script trips on purpose are disabled in its source, at the line,
//! with the reason (`# shellcheck disable=SC…`); the composed source is
//! checked with those directives, the sent text (which has no comments)
//! without the codes they name. `scripts/lint.sh` checks each `.sh` file on
//! its own as well. `SHELLCHECK` names the binary (the test command installs
//! one: `scripts/lib/shellcheck.sh`), else `shellcheck` on PATH.

#[path = "../build/shell.rs"]
#[allow(dead_code)] // this test uses part of the build script's module
mod shell;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod sent_scripts;

use sent_scripts::sent_scripts as scripts;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Runs `program args` with `script` on stdin; its combined output when it fails.
fn check(program: &str, args: &[&str], script: &str) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} must be installed to check the in-pod scripts: {e}"));
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (!out.status.success())
        .then(|| format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn shellcheck() -> String {
    std::env::var("SHELLCHECK").unwrap_or_else(|_| "shellcheck".to_owned())
}

/// The codes a source disables with `# shellcheck disable=SC…` lines.
fn disabled(source: &str) -> BTreeSet<String> {
    source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("# shellcheck disable="))
        .flat_map(|codes| codes.split_whitespace().next().unwrap_or_default().split(','))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_script_the_engine_sends_has_a_source_and_every_source_is_sent() {
    let mut sources = BTreeSet::new();
    for dir in ["exec/sh", "process/sh", "files/sh"] {
        for entry in std::fs::read_dir(src().join(dir)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert!(name.ends_with(".sh"), "{dir}/{name}: only .sh files here");
            if !name.starts_with("lib-") {
                sources.insert(format!("{dir}/{name}"));
            }
        }
    }
    let sent: BTreeSet<_> = scripts().iter().map(|(path, _)| (*path).to_owned()).collect();
    assert_eq!(sources, sent);
}

/// The numbers after `exit` (or `sys.exit(`, in relay.sh's Python) in `text`.
fn exit_statuses(text: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for word in ["exit ", "exit(", "exit\t"] {
        for (at, _) in text.match_indices(word) {
            let digits: String = text[at + word.len()..].chars().take_while(char::is_ascii_digit).collect();
            found.extend(digits.parse::<i32>());
        }
    }
    found
}

#[test]
fn every_status_a_script_exits_with_is_in_the_one_table() {
    let table: BTreeSet<i32> = sandbox_core::testing::script_exit::ALL.iter().map(|(n, _)| *n).collect();
    let mut checked = 0;
    // Every source, sent on its own or not (usage, transfers, ports too).
    for module in std::fs::read_dir(src()).unwrap() {
        let Ok(scripts) = std::fs::read_dir(module.unwrap().path().join("sh")) else { continue };
        for script in scripts {
            let path = script.unwrap().path();
            let source = std::fs::read_to_string(&path).unwrap();
            for status in exit_statuses(&source).into_iter().filter(|n| (80..=125).contains(n)) {
                assert!(table.contains(&status), "{}: exit {status} is not in core/src/script_exit.rs", path.display());
                checked += 1;
            }
        }
    }
    // The scan finds what the scripts use (a broken scan finds nothing).
    assert!(checked >= 20, "only {checked} statuses found");
    assert_eq!(exit_statuses("a || exit 91; sys.exit(90)\nexit\t7"), [91, 90, 7]);
}

#[test]
fn every_script_parses_in_dash_and_bash_posix() {
    for (path, sent) in scripts() {
        let source = shell::compose(&src().join(path)).unwrap().source;
        for text in [sent, &source] {
            assert_eq!(check("dash", &["-n"], text), None, "{path}");
            assert_eq!(check("bash", &["--posix", "-n"], text), None, "{path}");
        }
    }
}

#[test]
fn every_script_passes_shellcheck() {
    for (path, sent) in scripts() {
        let source = shell::compose(&src().join(path)).unwrap().source;
        let found = check(&shellcheck(), &["-s", "sh", "-S", "warning", "-f", "gcc", "-"], &source);
        assert_eq!(found, None, "{path}, composed from its sources");
        let codes = disabled(&source).into_iter().collect::<Vec<_>>().join(",");
        let mut args = vec!["-s", "sh", "-S", "warning", "-f", "gcc"];
        if !codes.is_empty() {
            args.extend(["-e", &codes]);
        }
        args.push("-");
        assert_eq!(check(&shellcheck(), &args, sent), None, "{path}, as sent (without {codes})");
    }
}

/// `make_private_dir` as the first execs into a fresh pod run it, at once:
/// a mkdir that loses the race (here: a `mkdir` that makes the directory and
/// fails, as the loser's does) still leaves a directory to use; a symlink in
/// its place is still refused. (CI met the race: one of 50 execs started
/// together failed `cannot create …/.agent-sandbox/run`.)
#[test]
fn make_private_dir_takes_a_directory_another_exec_made_first() {
    let lib = std::fs::read_to_string(src().join("exec/sh/lib-private-dir.sh")).unwrap();
    let dir = std::env::temp_dir().join(format!("private-dir-race-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = |target: &Path| {
        let script =
            format!("{lib}\nmkdir() {{ command mkdir \"$@\"; return 1; }}\nmake_private_dir \"$1\" && echo ok",);
        let out = Command::new("dash").args(["-c", &script, "sh"]).arg(target).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(run(&dir.join("a/run")), "ok");
    assert!(dir.join("a/run").is_dir());
    std::os::unix::fs::symlink(&dir, dir.join("b")).unwrap();
    assert_eq!(run(&dir.join("b/run")), "", "a symlinked parent is refused");
    // Every exec runs this: directories that exist cost no process start.
    let script = format!("{lib}\nmkdir() {{ echo mkdir; }}\nmake_private_dir \"$1\" && echo ok");
    let out = Command::new("dash").args(["-c", &script, "sh"]).arg(dir.join("a/run")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok", "no mkdir for directories that exist");
    std::fs::remove_dir_all(&dir).unwrap();
}
