//! The exit statuses the in-pod scripts use to say what they found: one
//! table for every script, so a status means the same wherever it appears
//! and a new script picks its meanings here. The scripts write the numbers
//! themselves (`exit 91`); `core/tests/shell_scripts.rs` checks that every
//! status from 80 to 125 a script uses is in [`ALL`]. Any other non-zero
//! status is a tool's failure, whose stderr becomes the error's message.

/// The background process has exited (stdin.sh).
pub const PROCESS_EXITED: i32 = 87;
/// `closeStdin` was called before (stdin.sh).
pub const STDIN_CLOSED: i32 = 88;
/// The process was spawned without `stdin: true` (stdin.sh).
pub const STDIN_NOT_OPEN: i32 = 89;
/// Nothing listens on the port, on 127.0.0.1 nor ::1 (relay.sh).
pub const NOTHING_LISTENS: i32 = 90;
/// The path does not exist.
pub const NOT_FOUND: i32 = 91;
/// The path is a directory where a file was expected.
pub const IS_DIRECTORY: i32 = 92;
/// The path exists and is not a directory where one was expected.
pub const NOT_DIRECTORY: i32 = 93;
/// The file is larger than the caller's limit (its size was printed first).
pub const TOO_LARGE: i32 = 94;
/// Fewer stdin bytes arrived than announced; nothing was replaced.
pub const SHORT_WRITE: i32 = 95;
/// The path is not a regular file (FIFO, socket, device).
pub const NOT_REGULAR: i32 = 96;
/// The image lacks a tool the script needs (stdout may name it).
pub const MISSING_TOOL: i32 = 97;
/// `overwrite: false` and the directory is not empty (upload.sh).
pub const NOT_EMPTY: i32 = 98;
/// `exclude` was given and the image's `tar` has no `--exclude` (BusyBox).
pub const NO_EXCLUDE: i32 = 99;

/// Every status of the table, with its name.
pub const ALL: [(i32, &str); 13] = [
    (PROCESS_EXITED, "PROCESS_EXITED"),
    (STDIN_CLOSED, "STDIN_CLOSED"),
    (STDIN_NOT_OPEN, "STDIN_NOT_OPEN"),
    (NOTHING_LISTENS, "NOTHING_LISTENS"),
    (NOT_FOUND, "NOT_FOUND"),
    (IS_DIRECTORY, "IS_DIRECTORY"),
    (NOT_DIRECTORY, "NOT_DIRECTORY"),
    (TOO_LARGE, "TOO_LARGE"),
    (SHORT_WRITE, "SHORT_WRITE"),
    (NOT_REGULAR, "NOT_REGULAR"),
    (MISSING_TOOL, "MISSING_TOOL"),
    (NOT_EMPTY, "NOT_EMPTY"),
    (NO_EXCLUDE, "NO_EXCLUDE"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_status_means_one_thing() {
        let mut seen = std::collections::BTreeSet::new();
        for (status, name) in ALL {
            assert!((80..=125).contains(&status), "{name}: {status} is outside the scripts' range");
            assert!(seen.insert(status), "{name}: {status} is taken twice");
        }
    }
}
