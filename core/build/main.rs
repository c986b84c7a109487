//! Build script of `sandbox-core`: the in-pod scripts. Every `core/src/**/sh/*.sh`
//! whose name does not start with `lib-` is a script the engine sends: it is
//! composed with the libraries it needs and minified (see `shell.rs`) into
//! `$OUT_DIR/sh/<its path under src/>`, which the crate embeds with
//! `include_str!` (the `in_pod_script!` macro in `exec/mod.rs`).

// A build script talks to cargo on stdout (`cargo:rerun-if-changed=`).
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};

mod shell;

fn main() {
    // Relative to the package root, the build script's working directory:
    // cargo then checks `rerun-if-changed` against this checkout's files.
    // Absolute paths would name the checkout that last ran the script, and
    // a target dir shared with it would never see this one's scripts change.
    let src = Path::new("src");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("sh");
    println!("cargo:rerun-if-changed=build/shell.rs");
    for script in shell_files(src) {
        println!("cargo:rerun-if-changed={}", script.display());
        let name = script.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with("lib-") {
            continue;
        }
        let composed = shell::compose(&script).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        for file in &composed.files {
            println!("cargo:rerun-if-changed={}", file.display());
        }
        let sent = shell::minify(&composed.source).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        let target = out.join(script.strip_prefix(src).expect("under src/"));
        std::fs::create_dir_all(target.parent().expect("a file")).expect("OUT_DIR is writable");
        std::fs::write(&target, sent).expect("OUT_DIR is writable");
    }
}

/// Every `.sh` file in a directory named `sh` under `dir`, sorted.
fn shell_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut entries: Vec<_> =
        std::fs::read_dir(dir).expect("core/src is readable").flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            found.extend(shell_files(&path));
        } else if path.extension().is_some_and(|e| e == "sh") && path.parent().is_some_and(|p| p.ends_with("sh")) {
            found.push(path);
        }
    }
    found
}
