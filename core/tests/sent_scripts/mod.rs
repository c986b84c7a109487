//! Every script the engine sends: its source under `core/src/` and the
//! constant that holds it as sent. `shell_scripts.rs` checks that this list
//! and the `.sh` files agree.

use sandbox_core::testing::{files, kill, process, relay, wrapper};

/// `(source path under core/src/, text sent)` for every script.
pub(crate) fn sent_scripts() -> Vec<(&'static str, &'static str)> {
    vec![
        ("exec/sh/wrapper.sh", wrapper::WRAPPER),
        ("exec/sh/kill.sh", kill::KILL),
        ("exec/sh/relay.sh", relay::RELAY),
        ("process/sh/spawn.sh", process::scripts::SPAWN),
        ("process/sh/read.sh", process::scripts::READ),
        ("process/sh/wait.sh", process::scripts::WAIT),
        ("process/sh/stdin.sh", process::scripts::STDIN),
        ("process/sh/signal.sh", process::scripts::SIGNAL),
        ("process/sh/list.sh", process::scripts::LIST),
        ("files/sh/read.sh", files::scripts::READ),
        ("files/sh/write.sh", files::scripts::WRITE),
        ("files/sh/mkdir.sh", files::scripts::MKDIR),
        ("files/sh/stat.sh", files::scripts::STAT),
        ("files/sh/readdir.sh", files::scripts::READDIR),
        ("files/sh/exists.sh", files::scripts::EXISTS),
        ("files/sh/remove.sh", files::scripts::REMOVE),
    ]
}
