//! The transfer scripts (`core/src/transfer/sh/<name>.sh`). Their arguments
//! travel in the environment the exec wrapper exports (data, never script
//! text), so they run through the wrapper: a transfer is killable like any
//! command (abort, dropped connection). Their exit statuses are the one
//! table's (`script_exit`): MISSING_TOOL when the image has no `tar`.

pub(crate) use crate::script_exit::{MISSING_TOOL, NOT_EMPTY, NO_EXCLUDE};

/// Env `transfer_dir`, `transfer_overwrite`; stdin the framed archive
/// (see [`super::Framer`]). Creates the directory and extracts into it with
/// the image's `tar`.
pub(crate) const UPLOAD: &str = in_pod_script!("transfer/sh/upload.sh");

/// Env `transfer_dir`, `transfer_excludes` (one pattern a line). Writes the
/// directory's tree to stdout as a tar archive.
pub(crate) const DOWNLOAD: &str = in_pod_script!("transfer/sh/download.sh");
