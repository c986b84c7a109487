//! The file scripts (`core/src/files/sh/<name>.sh`). Paths arrive as `$1`,
//! never spliced into the text; a path starting with `-` gets a `./` prefix
//! so no tool takes it for an option. Expected conditions are exit statuses
//! of the one table (`script_exit`); any other non-zero exit is a tool
//! failure whose stderr becomes the error message.

pub use crate::script_exit::{IS_DIRECTORY, NOT_DIRECTORY, NOT_FOUND, NOT_REGULAR, SHORT_WRITE, TOO_LARGE};

/// `$1` path, `$2` byte limit, `$3` offset, `$4` length (empty: to the
/// end). Prints the file's size on its own line, then the bytes of the range
/// (none when it starts at or past the end). Directories and other files
/// that are not regular (a FIFO would block, a device never end) are refused
/// before anything is read; a range over the limit is refused before it is
/// read; a file that grows past the limit while it is read is stopped by the
/// engine. `tail -c +N` seeks in a regular file (GNU tail), so a range deep
/// into a large or sparse file costs no read of what comes before it.
pub const READ: &str = in_pod_script!("files/sh/read.sh");

/// `$1` path, `$2` byte count on stdin. Writes a temp file next to the target
/// (same filesystem; its name does not grow with the target's, so a
/// 255-byte name still fits), checks its size, keeps an existing file's mode, and
/// renames it over the target: readers never see a partial file. A symlink
/// is written through, like `fs.writeFile`. `head -c` gives EOF after exactly
/// `$2` bytes (see the exec runtime's note on stdin).
pub const WRITE: &str = in_pod_script!("files/sh/write.sh");

/// `$1` path. `mkdir -p`: idempotent, creates parents.
pub const MKDIR: &str = in_pod_script!("files/sh/mkdir.sh");

/// `$1` path. Prints `<is-symlink 0|1> <st_mode hex> <size> <mtime seconds[.ms]>`
/// about the path's target (symlinks followed, like `fs.stat`).
pub const STAT: &str = in_pod_script!("files/sh/stat.sh");

/// `$1` path, `$2` most entries to print. Prints each entry name followed
/// by NUL (names may hold any byte but NUL and `/`). A glob in the directory
/// itself: no `find -printf` or `ls` parsing needed, and no path prefix to
/// strip.
pub const READDIR: &str = in_pod_script!("files/sh/readdir.sh");

/// `$1` path. Exit 0 if it exists (symlinks followed), [`NOT_FOUND`] if not.
pub const EXISTS: &str = in_pod_script!("files/sh/exists.sh");

/// `$1` path, `$2` recursive (`1`/`0`), `$3` force (`1`/`0`), like `fs.rm`:
/// a missing path is an error unless forced, a directory needs recursive.
pub const REMOVE: &str = in_pod_script!("files/sh/remove.sh");
