//! Every in-pod script, as the engine sends it (fragments concatenated), is
//! valid POSIX sh for dash (`dash -n`) and passes `shellcheck -s sh` at
//! warning level, except for the checks listed in [`ACCEPTED`], which the
//! scripts trip on purpose. `SHELLCHECK` names the binary (the test
//! command installs one: `scripts/lib/shellcheck.sh`), else `shellcheck` on
//! PATH.

use std::io::Write;
use std::process::{Command, Stdio};

use sandbox_core::{exec, files, process};

/// shellcheck codes the scripts trip by design, and why.
const ACCEPTED: &[(&str, &str)] = &[
    ("SC2034", "process records are read by position (`read -r p w ws r1 r2 …`); each script uses some of the fields"),
    ("SC2217", "`rm … </dev/null &` detaches a background job from the exec's stdin"),
    ("SC3013", "`-ot` is not in POSIX but dash, bash and busybox sh all have it"),
    ("SC2163", "`export \"$@\"` exports the NAME=VALUE pairs, as intended"),
    ("SC2125", "`g=*` keeps a literal `*`, used later as a glob pattern"),
];

fn scripts() -> Vec<(&'static str, &'static str)> {
    vec![
        ("exec wrapper", exec::wrapper::WRAPPER),
        ("exec kill", exec::kill::KILL),
        ("process spawn", process::scripts::SPAWN),
        ("process read", process::scripts::READ),
        ("process wait", process::scripts::WAIT),
        ("process stdin", process::scripts::STDIN),
        ("process signal", process::scripts::SIGNAL),
        ("process list", process::scripts::LIST),
        ("file read", files::scripts::READ),
        ("file write", files::scripts::WRITE),
        ("file mkdir", files::scripts::MKDIR),
        ("file stat", files::scripts::STAT),
        ("file readdir", files::scripts::READDIR),
        ("file exists", files::scripts::EXISTS),
        ("file remove", files::scripts::REMOVE),
    ]
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

#[test]
fn every_script_parses_in_dash() {
    for (name, script) in scripts() {
        assert_eq!(check("dash", &["-n"], script), None, "{name}");
    }
}

#[test]
fn every_script_passes_shellcheck() {
    let excluded = ACCEPTED.iter().map(|(code, _)| *code).collect::<Vec<_>>().join(",");
    for (name, script) in scripts() {
        let shellcheck = std::env::var("SHELLCHECK").unwrap_or_else(|_| "shellcheck".to_owned());
        let found = check(&shellcheck, &["-s", "sh", "-S", "warning", "-f", "gcc", "-e", &excluded, "-"], script);
        assert_eq!(found, None, "{name}");
    }
}
