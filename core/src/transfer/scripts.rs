//! The transfer scripts (`core/src/transfer/sh/<name>.sh`). Their arguments
//! travel in the environment the exec wrapper exports (data, never script
//! text), so they run through the wrapper: a transfer is killable like any
//! command (abort, dropped connection). Exit codes 91 and 93 are the file
//! scripts' (`files::scripts`); the rest are below.

/// The image has no `tar`.
pub(crate) const NO_TAR: i32 = 97;
/// `overwrite: false` and the directory is not empty.
pub(crate) const NOT_EMPTY: i32 = 98;
/// `exclude` was given and the image's `tar` has no `--exclude` (BusyBox).
pub(crate) const NO_EXCLUDE: i32 = 99;

/// Env `transfer_dir`, `transfer_overwrite`; stdin the framed archive
/// (see [`super::Framer`]). Creates the directory and extracts into it with
/// the image's `tar`.
pub(crate) const UPLOAD: &str = in_pod_script!("transfer/sh/upload.sh");

/// Env `transfer_dir`, `transfer_excludes` (one pattern a line). Writes the
/// directory's tree to stdout as a tar archive.
pub(crate) const DOWNLOAD: &str = in_pod_script!("transfer/sh/download.sh");
