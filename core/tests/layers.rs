//! The core's layering (docs/ARCHITECTURE.md, "Which module may use which"):
//! each top-level module refers only to the modules below it. Read from the
//! sources, so a new `use crate::…` that climbs a layer fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module → the modules it may use.
const ALLOWED: &[(&str, &[&str])] = &[
    ("provider", &["lifecycle", "sandbox", "exec", "client", "config", "error"]),
    ("lifecycle", &["exec", "client", "config", "error"]),
    ("sandbox", &["transfer", "process", "files", "ports", "usage", "exec", "args", "error"]),
    ("transfer", &["files", "exec", "args", "error"]),
    ("process", &["exec", "client", "error"]),
    ("files", &["exec", "args", "error"]),
    ("ports", &["exec", "error"]),
    ("usage", &["exec", "error"]),
    ("exec", &["client", "args", "error"]),
    ("client", &["config", "error"]),
    ("config", &["args", "error"]),
    ("args", &["error"]),
    ("error", &[]),
    ("trace", &[]),
    ("sync", &[]),
    ("script_exit", &[]),
];

/// Modules every module may use.
const EVERYWHERE: &[&str] = &["trace", "sync", "script_exit"];

/// Every `crate::<module>` named in code (not comments) under `path`.
fn uses(path: &Path, found: &mut BTreeSet<String>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            uses(&entry.unwrap().path(), found);
        }
        return;
    }
    let text = std::fs::read_to_string(path).unwrap();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (at, _) in line.match_indices("crate::") {
            let name: String = line[at + 7..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            // The crate root re-exports a few items (lib.rs).
            let module = match name.as_str() {
                "Error" | "ErrorCode" | "Result" => "error",
                "Provider" => "provider",
                "Sandbox" => "sandbox",
                other => other,
            };
            assert!(!module.is_empty(), "{}: name the module after `crate::`", path.display());
            found.insert(module.to_owned());
        }
    }
}

#[test]
fn modules_use_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut seen = BTreeSet::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if module == "lib" {
            continue;
        }
        let Some(may) = allowed.get(module.as_str()) else {
            panic!("core/src/{module} is not in the layer table (tests/layers.rs, docs/ARCHITECTURE.md)");
        };
        seen.insert(module.clone());
        let mut found = BTreeSet::new();
        uses(&path, &mut found);
        found.remove(&module);
        let climbing: Vec<_> =
            found.iter().filter(|m| !may.contains(&m.as_str()) && !EVERYWHERE.contains(&m.as_str())).collect();
        assert!(climbing.is_empty(), "{module} uses {climbing:?}, which it may not (may: {may:?})");
    }
    assert_eq!(seen.len(), ALLOWED.len(), "every module of the table exists");
}
