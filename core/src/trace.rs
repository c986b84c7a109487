//! Debug tracing on stderr, for finding out where time goes or what hangs:
//! `AGENT_SANDBOX_LOG=debug` prints the lifecycle calls and their progress
//! events, and every exec's start and end. Off by default (one atomic load
//! per call site then); the variable is read once.
//!
//! Lines name ids, pods, run ids, byte counts, env variable *names*, exit
//! codes, error codes and timings. Never tokens, env values or command text:
//! a command line from a model may carry a secret.

use std::fmt;
use std::io::Write;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable that switches tracing on (`debug`).
pub(crate) const VARIABLE: &str = "AGENT_SANDBOX_LOG";

/// Whether tracing is on.
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var(VARIABLE).is_ok_and(|v| matches!(v.as_str(), "debug" | "trace" | "1")))
}

/// Writes one line (use [`trace!`](crate::trace!)).
pub(crate) fn line(args: fmt::Arguments<'_>) {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let _ = writeln!(std::io::stderr().lock(), "[agent-sandbox {}.{:03}] {args}", ms / 1000, ms % 1000);
}

/// `trace!("connect {id}: ready")`: a line on stderr when tracing is on;
/// the arguments are not evaluated otherwise.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => {
        if $crate::trace::enabled() {
            $crate::trace::line(format_args!($($arg)*));
        }
    };
}
