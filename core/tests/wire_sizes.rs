//! What each in-pod script costs on the wire, held at or below what it cost
//! before the scripts became readable sources (commit efb094f, the last with
//! the scripts as Rust string constants). The exec request's URL carries argv
//! as `command=<arg>` pairs, form-urlencoded as kube-rs builds them (`%0A`
//! for a newline, `+` for a space), so a byte of script costs one to three
//! bytes of every request; the follow and wait scripts travel as a command on
//! the wrapper's stdin instead. `cargo test --test wire_sizes -- --nocapture`
//! prints the table.

use sandbox_core::testing::process::{self, MAX_CAP};
use sandbox_core::testing::trailer::MAX_TRAILER;
use sandbox_core::testing::wrapper::{self, CommandStdin, ScriptCommand, INLINE_COMMAND_MAX};

mod sent_scripts;

use sent_scripts::sent_scripts;

/// The `command=…` part of the URL for `argv`.
fn url_bytes(argv: &[String]) -> usize {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for a in argv {
        s.append_pair("command", a);
    }
    s.finish().len()
}

/// `/bin/sh -c <script> sh`, without the script's own arguments (the same
/// before and after).
fn script_url(script: &str) -> usize {
    url_bytes(&wrapper::script_argv(script, Vec::new()))
}

/// The stdin bytes ahead of the user's for a script run by the wrapper, as
/// `process::follow` and `process::wait` run theirs: its command and the
/// env pairs that carry its arguments (at efb094f the budget's measure left
/// the pairs out, so it is stricter now).
fn stdin_prefix(script: &ScriptCommand) -> usize {
    let (run, secret) = ("0123456789abcdef.1", "0123456789abcdef0123456789abcdef");
    wrapper::wrapper_argv(run, secret, &script.shell(), CommandStdin::None, None, false).unwrap().stdin_prefix.len()
}

#[test]
#[allow(clippy::print_stdout)]
fn no_script_costs_more_on_the_wire_than_before() {
    // URL bytes of each script at efb094f, but for the terminal's (issue 20
    // item 1), measured at its merge: the wrapper's handshake (`$6`, raw
    // mode, the ready and started lines), kill.sh's hangup and signal modes,
    // and the signal_tree that spawn.sh now shares with signal.sh. Plus
    // make_private_dir's check before its mkdir (23f5140), in the three
    // scripts that make private directories: two process starts fewer on
    // every exec, for these bytes.
    const PRIVATE_DIR_CHECK: usize = 27;
    // Plus spawn.sh's export of the env pairs after every word of the
    // command's start is expanded, one pair at a time (a caller's `J` or `d`
    // chose what ran).
    const SPAWN_ENV_LAST: usize = 96;
    let before = |path: &str| match path {
        "exec/sh/wrapper.sh" => 3038 + PRIVATE_DIR_CHECK,
        "exec/sh/kill.sh" => 4828 + PRIVATE_DIR_CHECK,
        // Its merge (issue 32): only ports the node cannot reach send it.
        "exec/sh/relay.sh" => 2425,
        "process/sh/spawn.sh" => 6868 + PRIVATE_DIR_CHECK + SPAWN_ENV_LAST,
        "process/sh/read.sh" => 3626,
        "process/sh/wait.sh" => 3253,
        "process/sh/stdin.sh" => 3418,
        "process/sh/signal.sh" => 3384,
        "process/sh/list.sh" => 3333,
        "files/sh/read.sh" => 770,
        "files/sh/write.sh" => 899,
        "files/sh/mkdir.sh" => 200,
        "files/sh/stat.sh" => 324,
        "files/sh/readdir.sh" => 451,
        "files/sh/exists.sh" => 139,
        "files/sh/remove.sh" => 347,
        new => panic!("{new}: a new script; give it a budget here (what it costs now)"),
    };
    let mut over = Vec::new();
    println!("{:20} {:>6} {:>6} {:>6}", "script", "bytes", "URL", "before");
    for (name, script) in sent_scripts() {
        let before = before(name);
        let now = script_url(script);
        println!("{name:20} {:6} {now:6} {before:6}", script.len());
        if now > before {
            over.push(format!("{name}: {now} URL bytes, {before} before"));
        }
    }
    // (name, command, stdin prefix bytes at efb094f, with a 32-byte secret)
    let id = "0123456789abcdef0123".to_owned();
    let follow = ScriptCommand::new(
        process::scripts::READ,
        [id.clone(), "0".into(), "0".into(), "follow".into(), (MAX_CAP + MAX_TRAILER as u64).to_string()],
    );
    let wait = ScriptCommand::new(process::scripts::WAIT, [id]);
    for (name, script, before) in [("follow (stdin)", follow, 2183), ("wait (stdin)", wait, 1917)] {
        let now = stdin_prefix(&script);
        let command = script.shell().command;
        let how = if command.len() > INLINE_COMMAND_MAX { "head -c" } else { "read" };
        println!("{name:20} {:6} {now:6} {before:6} (stdin, read with {how})", command.len());
        if now > before {
            over.push(format!("{name}: {now} stdin bytes, {before} before"));
        }
    }
    assert!(over.is_empty(), "{over:?}");
}
